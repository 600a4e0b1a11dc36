//! The bills as a chart: one stacked bar per system, its lines grouped into
//! what they pay for (data crossing zones, storage, requests, machines).

use std::path::Path;

use plotters::prelude::*;

use crate::model::Bill;

/// What a line of a bill pays for, by its item's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    CrossZone,
    Storage,
    Requests,
    Machines,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::CrossZone,
        Kind::Storage,
        Kind::Requests,
        Kind::Machines,
    ];

    pub fn of(item: &str) -> Kind {
        if item.starts_with("cross-zone") {
            Kind::CrossZone
        } else if item.starts_with("disks") || item.starts_with("object storage") {
            Kind::Storage
        } else if item.starts_with("object ") || item.starts_with("S3 Express") {
            Kind::Requests
        } else {
            Kind::Machines
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::CrossZone => "data across zones",
            Kind::Storage => "disks and object storage",
            Kind::Requests => "object-store requests and transfer",
            Kind::Machines => "brokers, agents, metastore",
        }
    }

    fn colour(self) -> RGBColor {
        match self {
            Kind::CrossZone => RGBColor(214, 39, 40),
            Kind::Storage => RGBColor(31, 119, 180),
            Kind::Requests => RGBColor(255, 127, 14),
            Kind::Machines => RGBColor(44, 160, 44),
        }
    }
}

/// Each bill's monthly dollars by kind, in `Kind::ALL`'s order.
pub fn by_kind(bill: &Bill) -> [f64; 4] {
    let mut sums = [0.0; 4];
    for line in &bill.lines {
        let k = Kind::of(&line.item);
        let i = Kind::ALL.iter().position(|x| *x == k).expect("a kind");
        sums[i] += line.monthly_usd;
    }
    sums
}

/// Writes the chart as SVG to `path`.
pub fn write(bills: &[Bill], title: &str, path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(chart_error)?;
    let top = bills.iter().map(Bill::total).fold(0.0, f64::max).max(1.0) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(90)
        .build_cartesian_2d(
            (0..bills.len().saturating_sub(1)).into_segmented(),
            0.0..top,
        )
        .map_err(chart_error)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("$ a month")
        .y_label_formatter(&|v| format!("${:.0}k", v / 1000.0))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => bills.get(*i).map_or(String::new(), |b| b.system.clone()),
            _ => String::new(),
        })
        .draw()
        .map_err(chart_error)?;
    for (k, kind) in Kind::ALL.iter().enumerate() {
        let colour = kind.colour();
        chart
            .draw_series(bills.iter().enumerate().map(|(i, bill)| {
                let sums = by_kind(bill);
                let below: f64 = sums[..k].iter().sum();
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), below),
                        (SegmentValue::Exact(i + 1), below + sums[k]),
                    ],
                    colour.filled(),
                );
                bar.set_margin(0, 0, 30, 30);
                bar
            }))
            .map_err(chart_error)?
            .label(kind.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    chart
        .draw_series(bills.iter().enumerate().map(|(i, bill)| {
            Text::new(
                format!("${:.0}k", bill.total() / 1000.0),
                (SegmentValue::CenterOf(i), bill.total() + top * 0.02),
                ("sans-serif", 15),
            )
        }))
        .map_err(chart_error)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(chart_error)?;
    root.present().map_err(chart_error)?;
    Ok(())
}

fn chart_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart: {e:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Inputs, model};

    #[test]
    fn every_dollar_is_in_one_kind() {
        for bill in model::all(&Inputs::default()) {
            let sums = by_kind(&bill);
            assert!((sums.iter().sum::<f64>() - bill.total()).abs() < 1e-6);
        }
        assert_eq!(Kind::of("cross-zone: metastore"), Kind::CrossZone);
        assert_eq!(Kind::of("object storage (tiered)"), Kind::Storage);
        assert_eq!(Kind::of("object PUTs (tiered)"), Kind::Requests);
        assert_eq!(Kind::of("agents"), Kind::Machines);
    }

    #[test]
    fn the_chart_names_every_system() {
        let bills = model::all(&Inputs::default());
        let path = std::env::temp_dir().join(format!("floe-cost-{}.svg", std::process::id()));
        write(&bills, "test", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        for b in &bills {
            assert!(svg.contains(&b.system), "{} missing", b.system);
        }
        assert!(svg.contains("data across zones"));
    }
}
