//! The seeds CI runs, and the promise that a seed replays exactly.

#[test]
fn a_fixed_set_of_seeds_finds_no_anomaly() {
    for seed in 0..150 {
        if let Err(f) = floe_sim::run(seed, 1_500) {
            let tail = f
                .trace
                .iter()
                .rev()
                .take(40)
                .rev()
                .cloned()
                .collect::<Vec<_>>();
            panic!(
                "seed {} failed at step {}: {}\n{}",
                f.seed,
                f.step,
                f.why,
                tail.join("\n")
            );
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let (a, trace_a) = floe_sim::run(42, 1_000).unwrap();
    let (b, trace_b) = floe_sim::run(42, 1_000).unwrap();
    assert_eq!(a, b);
    assert_eq!(trace_a, trace_b);
    let (_, other) = floe_sim::run(43, 1_000).unwrap();
    assert_ne!(trace_a, other);
}
