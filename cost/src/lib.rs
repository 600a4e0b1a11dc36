//! `floe cost`: what a workload costs a month on Apache Kafka (three zones,
//! RF=3; with fetch-from-follower; with tiered storage) and on floe, line by
//! line, each with its formula and inputs. `docs/cost.md` explains the
//! formulas and where every default comes from.

pub mod chart;
pub mod flush;
pub mod inputs;
pub mod measured;
pub mod model;

use std::fmt::Write;

pub use inputs::Inputs;
pub use measured::Measured;
pub use model::{Bill, Line};

/// The bills as a terminal table: per system its lines (with formulas when
/// `formulas`), its total, and its notes; then the totals side by side.
pub fn table(bills: &[Bill], formulas: bool) -> String {
    let mut out = String::new();
    for bill in bills {
        let _ = writeln!(out, "{}", bill.system);
        for l in &bill.lines {
            let _ = writeln!(out, "  {:<36} {:>14}", l.item, money(l.monthly_usd));
            if formulas {
                let _ = writeln!(out, "      {}", l.formula);
            }
        }
        let _ = writeln!(out, "  {:<36} {:>14}", "total a month", money(bill.total()));
        for note in &bill.notes {
            let _ = writeln!(out, "  note: {note}");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "{:<30} {:>14} {:>16}", "system", "a month", "a year");
    for bill in bills {
        let _ = writeln!(
            out,
            "{:<30} {:>14} {:>16}",
            bill.system,
            money(bill.total()),
            money(bill.total() * 12.0)
        );
    }
    out
}

/// The inputs and bills as JSON.
pub fn json(inputs: &Inputs, bills: &[Bill]) -> String {
    let totals: Vec<_> = bills
        .iter()
        .map(|b| serde_json::json!({ "system": b.system, "monthly_usd": b.total() }))
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({
        "inputs": inputs,
        "bills": bills,
        "totals": totals,
    }))
    .expect("plain data encodes")
}

/// Dollars with thousands separators.
fn money(x: f64) -> String {
    let cents = (x * 100.0).round() as i64;
    let (whole, cents) = (cents / 100, cents % 100);
    let digits = whole.to_string();
    let mut grouped = String::new();
    for (n, c) in digits.chars().enumerate() {
        if n > 0 && (digits.len() - n) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("${grouped}.{cents:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_is_grouped() {
        assert_eq!(money(1234567.891), "$1,234,567.89");
        assert_eq!(money(0.5), "$0.50");
    }

    #[test]
    fn overrides_come_from_toml_and_assignments() {
        let mut i = Inputs::from_toml("[workload]\nwrite_mib_s = 1024.0\n").unwrap();
        assert_eq!(i.workload.write_mib_s, 1024.0);
        assert_eq!(i.workload.zones, 3.0, "the rest keeps its default");
        i.set("workload.read_fanout=3").unwrap();
        i.set("floe.s3_express=true").unwrap();
        assert_eq!(i.workload.read_fanout, 3.0);
        assert!(i.floe.s3_express);
        assert!(i.set("workload.colour=blue").is_err());
        assert!(i.set("nowhere.x=1").is_err());
        assert!(Inputs::from_toml("[workload]\nunknown = 1\n").is_err());
    }

    #[test]
    fn the_table_and_json_carry_every_bill() {
        let i = Inputs::default();
        let bills = model::all(&i);
        let t = table(&bills, true);
        for b in &bills {
            assert!(t.contains(&b.system));
        }
        let j: serde_json::Value = serde_json::from_str(&json(&i, &bills)).unwrap();
        assert_eq!(j["bills"].as_array().unwrap().len(), 4);
        assert_eq!(j["inputs"]["workload"]["zones"], 3.0);
    }
}
