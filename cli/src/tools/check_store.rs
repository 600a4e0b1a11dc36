//! `floe check-store URL`: every call floe makes of an object store, tried
//! against it (see `floe_storage::conformance`), one line per check; the exit
//! status says whether floe can use the store.

use floe_storage::conformance::{self, Outcome};

pub async fn run(url: &str) -> anyhow::Result<()> {
    let prefix = format!("floe-check-store/{}", floe_metastore::random_id().simple());
    let findings = conformance::run(url, &prefix).await?;
    let mut failed = 0;
    for finding in &findings {
        let (mark, why) = match &finding.outcome {
            Outcome::Passed => ("ok  ", String::new()),
            Outcome::Failed(why) => {
                failed += 1;
                ("FAIL", format!(": {why}"))
            }
            Outcome::NotChecked(why) => ("--  ", format!(": not checked, {why}")),
        };
        println!("{mark} {}{why}", finding.check);
    }
    anyhow::ensure!(failed == 0, "{failed} of {} checks failed", findings.len());
    Ok(())
}
