//! The run over time as SVG: throughput above, latency percentiles below.

use std::path::Path;

use plotters::prelude::*;

use crate::report::{Point, Report};

type Series<'a> = (&'a str, RGBColor, fn(&Point) -> f64);

pub fn write(report: &Report, path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1000, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let (top, bottom) = root.split_vertically(360);
    let title = format!(
        "{}: {} B records, {} partitions",
        report.label,
        report.workload.record_size,
        report.workload.partitions()
    );
    panel(
        &top,
        &report.series,
        &format!("{title}: throughput"),
        "MiB/s",
        &[
            ("produce", BLUE, |p| p.produce_mib_s),
            ("consume", GREEN, |p| p.consume_mib_s),
        ],
    )?;
    panel(
        &bottom,
        &report.series,
        "latency (each second's percentiles)",
        "ms",
        &[
            ("produce p50", CYAN, |p| p.produce_p50_ms),
            ("produce p99", BLUE, |p| p.produce_p99_ms),
            ("end-to-end p50", MAGENTA, |p| p.e2e_p50_ms),
            ("end-to-end p99", RED, |p| p.e2e_p99_ms),
        ],
    )?;
    root.present().map_err(plot_error)?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    points: &[Point],
    title: &str,
    unit: &str,
    series: &[Series],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let x0 = points.first().map_or(0.0, |p| p.t);
    let x1 = points.last().map_or(1.0, |p| p.t).max(x0 + 1.0);
    let y1 = points
        .iter()
        .flat_map(|p| series.iter().map(move |(_, _, f)| f(p)))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("seconds since measuring began")
        .y_desc(unit)
        .draw()
        .map_err(plot_error)?;
    for (name, colour, f) in series {
        let colour = *colour;
        chart
            .draw_series(LineSeries::new(points.iter().map(|p| (p.t, f(p))), colour))
            .map_err(plot_error)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

fn plot_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e:?}")
}
