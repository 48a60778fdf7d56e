//! `lab async`: the rows, the targets and the report, as the JSON makes them.

use super::*;

#[test]
fn workloads_and_runtimes_are_written_and_read_by_their_names() {
    use AsyncWorkload as W;
    for w in [
        W::Sleep20us,
        W::Sleep100us,
        W::Sleep1ms,
        W::Interval100us,
        W::Interval1ms,
        W::Sleep10kTasks,
        W::PacedUdp100mbit,
        W::Hyper1core,
        W::HyperHello,
        W::Hyper6kClose,
        W::HyperHelloClose,
        W::QuinnRr,
        W::QuinnBulk,
    ] {
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(json, format!("\"{}\"", w.name()));
        assert_eq!(serde_json::from_str::<W>(&json).unwrap(), w);
    }
    use RuntimeKind as R;
    for r in [R::Soft, R::TokioCt, R::TokioMt, R::Smol] {
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, format!("\"{}\"", r.name()));
        assert_eq!(serde_json::from_str::<R>(&json).unwrap(), r);
    }
    assert_eq!(R::TokioCt.name(), "tokio-ct");
    assert_eq!(W::PacedUdp100mbit.name(), "paced-udp-100mbit");
}

#[test]
fn the_paced_udp_floor_is_a_top_level_field_absent_from_older_reports() {
    let old: AsyncResult =
        serde_json::from_str(r#"{"mode":"full","skipped":null,"rows":[],"targets":[]}"#).unwrap();
    assert_eq!(old.extra.paced_udp_floor_stddev_us, None);
    assert!(old.extra.paced_udp_floor_stddev_us_rounds.is_empty());
    let extra = AsyncExtra {
        paced_udp_floor_stddev_us: Some(8.5),
        paced_udp_floor_stddev_us_rounds: Vec::new(),
        notes: Vec::new(),
    };
    let new = AsyncResult::ran("quick", extra, Vec::new(), Vec::new());
    let json = serde_json::to_value(&new).unwrap();
    assert_eq!(json["paced_udp_floor_stddev_us"], 8.5);
    assert!(
        json.get("paced_udp_floor_stddev_us_rounds").is_none(),
        "{json}"
    );
    let md = new.render(std::path::Path::new(".")).unwrap().markdown;
    assert!(
        md.contains("a whole core, has an inter-arrival stddev of 8.50 µs (measured after"),
        "{md}"
    );
    // In rounds: each round's floor is in the JSON and the report.
    let extra = AsyncExtra {
        paced_udp_floor_stddev_us: Some(6.0),
        paced_udp_floor_stddev_us_rounds: vec![5.5, 6.0, 9.25],
        notes: Vec::new(),
    };
    let new = AsyncResult::ran("full", extra, Vec::new(), Vec::new());
    let back: AsyncResult = serde_json::from_value(serde_json::to_value(&new).unwrap()).unwrap();
    assert_eq!(
        back.extra.paced_udp_floor_stddev_us_rounds,
        vec![5.5, 6.0, 9.25]
    );
    let md = new.render(std::path::Path::new(".")).unwrap().markdown;
    assert!(
        md.contains("6.00 µs (the median of its rounds, interleaved with the runtimes': 5.50, 6.00, 9.25 µs)"),
        "{md}"
    );
}

#[test]
fn paced_udp_rows_over_rounds_keep_each_round_and_the_targets_pair_them() {
    // Rounds as `paced_udp` makes them: one row per round and runtime.
    let round = |runtime, stddev: f64, cpu: f64, p99: f64| {
        let precision = (runtime == RuntimeKind::Soft).then(Precision::default);
        let mut r = AsyncRow::new(udp::PACED_UDP, runtime, precision);
        r.stddev_us = Some(stddev);
        r.cpu_ns_per_op = Some(cpu);
        r.p99_us = Some(p99);
        r
    };
    let soft = AsyncRow::over_rounds(vec![
        round(RuntimeKind::Soft, 2.0, 40.0, 130.0),
        round(RuntimeKind::Soft, 30.0, 50.0, 900.0),
        round(RuntimeKind::Soft, 3.0, 45.0, 140.0),
    ])
    .unwrap();
    let smol = AsyncRow::over_rounds(vec![
        round(RuntimeKind::Smol, 12.0, 50.0, 150.0),
        round(RuntimeKind::Smol, 10.0, 50.0, 145.0),
        round(RuntimeKind::Smol, 20.0, 60.0, 170.0),
    ])
    .unwrap();
    // A round without a figure: the others' median, and no rounds kept for it (the
    // targets pair rounds by index).
    let mut lacking = round(RuntimeKind::Soft, 2.0, 40.0, 130.0);
    lacking.stddev_us = None;
    let partial = AsyncRow::over_rounds(vec![
        lacking,
        round(RuntimeKind::Soft, 4.0, 50.0, 900.0),
        round(RuntimeKind::Soft, 6.0, 45.0, 140.0),
    ])
    .unwrap();
    assert_eq!(partial.stddev_us, Some(5.0));
    assert!(partial.stddev_us_rounds.is_empty());
    assert_eq!(partial.cpu_ns_per_op_rounds, vec![40.0, 50.0, 45.0]);
    // Every figure the median of the rounds', each round's stddev kept.
    assert_eq!(soft.stddev_us, Some(3.0));
    assert_eq!(soft.p99_us, Some(140.0));
    assert_eq!(soft.stddev_us_rounds, vec![2.0, 30.0, 3.0]);
    let json = serde_json::to_value(&soft).unwrap();
    assert_eq!(
        json["stddev_us_rounds"],
        serde_json::json!([2.0, 30.0, 3.0])
    );
    let checks = targets(&[soft.clone(), smol.clone()]);
    let stddev = checks
        .iter()
        .find(|t| {
            t.figure
                .starts_with("paced UDP 100 Mbit/s, inter-arrival stddev")
        })
        .unwrap();
    // Per round 2/12, 30/10, 3/20: their median (the ratio of the medians is 3/12).
    assert!(
        (stddev.measured - 2.0 / 12.0).abs() < 1e-3,
        "{}",
        stddev.measured
    );
    assert!(stddev.met);
    assert!(
        stddev
            .figure
            .contains("median of 3 interleaved rounds, per-round range 0.15-3.00"),
        "{}",
        stddev.figure
    );
    let cpu = checks
        .iter()
        .find(|t| {
            t.figure
                .starts_with("paced UDP 100 Mbit/s, sender CPU per datagram")
        })
        .unwrap();
    assert_eq!(cpu.measured, 0.8); // 40/50, 50/50, 45/60
    // An older report's rows, one run each: the ratio of the rows.
    let (mut soft, mut smol) = (soft, smol);
    for r in [&mut soft, &mut smol] {
        r.stddev_us_rounds.clear();
        r.cpu_ns_per_op_rounds.clear();
    }
    let old = targets(&[soft, smol]);
    let stddev = old
        .iter()
        .find(|t| {
            t.figure
                .starts_with("paced UDP 100 Mbit/s, inter-arrival stddev")
        })
        .unwrap();
    assert_eq!(stddev.measured, 0.25); // 3 / 12
    assert!(!stddev.figure.contains("rounds"), "{}", stddev.figure);
}

#[test]
fn the_many_task_targets_read_the_median_of_their_rounds() {
    let row = |runtime, cpu: &[f64], p99: &[f64]| {
        let precision = (runtime == RuntimeKind::Soft).then(Precision::default);
        let mut r = AsyncRow::new(sleep::SLEEP_10K, runtime, precision);
        r.cpu_ns_per_op = Some(median(cpu));
        r.late_p99_us = Some(median(p99));
        r.cpu_ns_per_op_rounds = cpu.to_vec();
        r.late_p99_us_rounds = p99.to_vec();
        r
    };
    let rows = [
        row(
            RuntimeKind::Soft,
            &[500.0, 900.0, 600.0],
            &[10.0, 400.0, 20.0],
        ),
        row(
            RuntimeKind::TokioCt,
            &[500.0, 900.0, 400.0],
            &[1000.0, 2000.0, 100.0],
        ),
    ];
    let targets = targets(&rows);
    let cpu = targets
        .iter()
        .find(|t| t.figure.starts_with("10,000 sleeping tasks, CPU per fire"))
        .unwrap();
    // Per round 1.0, 1.0, 1.5: their median, not the ratio of the medians (600 / 500).
    assert_eq!(cpu.measured, 1.0);
    assert!(
        cpu.figure
            .contains("median of 3 interleaved rounds, per-round range 1.00-1.50"),
        "{}",
        cpu.figure
    );
    let p99 = targets
        .iter()
        .find(|t| t.figure.starts_with("10,000 sleeping tasks, lateness p99"))
        .unwrap();
    // Per round 0.01, 0.2, 0.2 (the ratio of the medians, 20 / 1000, would be met).
    assert_eq!(p99.measured, 0.2);
    assert!(!p99.met);
    // An older report's rows, one run each: the ratio of the rows.
    let mut old = rows.clone();
    for r in &mut old {
        r.cpu_ns_per_op_rounds.clear();
        r.late_p99_us_rounds.clear();
    }
    let json = serde_json::to_value(&old[0]).unwrap();
    assert!(json.get("cpu_ns_per_op_rounds").is_none(), "{json}");
    let cpu = targets_named(&old, "10,000 sleeping tasks, CPU per fire: soft / tokio-ct");
    assert_eq!(cpu, Some(1.2)); // 600 / 500
}

#[test]
fn the_quinn_bulk_target_reads_the_median_of_its_rounds() {
    let row = |runtime, cpu: &[f64]| {
        let precision = (runtime == RuntimeKind::Soft).then(Precision::default);
        let rounds = cpu
            .iter()
            .map(|&c| {
                let mut r = AsyncRow::new(quic::QUINN_BULK, runtime, precision);
                r.cpu_ns_per_op = Some(c);
                r
            })
            .collect();
        AsyncRow::over_rounds(rounds).unwrap()
    };
    // Per round 1.0, 1.1, 0.9375: their median, 1.0, is met; the ratio of the medians
    // (2.2 / 2.0) would not be.
    let rows = [
        row(RuntimeKind::Soft, &[2.0, 2.2, 3.0]),
        row(RuntimeKind::TokioCt, &[2.0, 2.0, 3.2]),
    ];
    let bulk = targets(&rows)
        .into_iter()
        .find(|t| t.figure.starts_with("unchanged quinn, bulk download"))
        .unwrap();
    assert!((bulk.measured - 1.0).abs() < 1e-9, "{}", bulk.measured);
    assert!(bulk.met);
    assert!(
        bulk.figure
            .contains("median of 3 interleaved rounds, per-round range 0.94-1.10"),
        "{}",
        bulk.figure
    );
}

#[test]
fn a_row_over_rounds_holds_their_medians_and_each_round() {
    let round = |cpu: f64, p99: f64, max: f64| {
        let mut r = AsyncRow::new(sleep::SLEEP_10K, RuntimeKind::TokioCt, None);
        (r.cpu_ns_per_op, r.ops_per_s) = (Some(cpu), Some(1e9 / cpu));
        (r.late_p99_us, r.late_max_us) = (Some(p99), Some(max));
        r
    };
    let row = AsyncRow::over_rounds(vec![
        round(500.0, 30.0, 90.0),
        round(700.0, 10.0, 400.0),
        round(600.0, 20.0, 50.0),
    ])
    .unwrap();
    assert_eq!(row.cpu_ns_per_op, Some(600.0));
    assert_eq!(row.late_p99_us, Some(20.0));
    assert_eq!(row.late_max_us, Some(400.0), "the largest, not a median");
    assert_eq!(row.late_p50_us, None, "no round measured it");
    assert_eq!(row.cpu_ns_per_op_rounds, [500.0, 700.0, 600.0]);
    assert_eq!(row.late_p99_us_rounds, [30.0, 10.0, 20.0]);
    assert_eq!(row.ops_per_s_rounds.len(), 3);
    assert_eq!(row.idle_spin_ns_per_op, None, "no round measured it");
    assert!(AsyncRow::over_rounds(Vec::new()).is_none());
    // The soft runtime's idle spin: the median of its rounds, written and read back; a
    // row without it (an older report's) reads as not measured.
    let spun = |spin: f64| {
        let mut r = round(500.0, 30.0, 90.0);
        r.runtime = RuntimeKind::Soft;
        r.idle_spin_ns_per_op = Some(spin);
        r
    };
    let soft = AsyncRow::over_rounds(vec![spun(90.0), spun(300.0), spun(150.0)]).unwrap();
    assert_eq!(soft.idle_spin_ns_per_op, Some(150.0));
    let json = serde_json::to_value(&soft).unwrap();
    let back: AsyncRow = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back.idle_spin_ns_per_op, Some(150.0));
    let mut older = json;
    older.as_object_mut().unwrap().remove("idle_spin_ns_per_op");
    let back: AsyncRow = serde_json::from_value(older).unwrap();
    assert_eq!(back.idle_spin_ns_per_op, None);
}

/// The measured value of the target called exactly `name`.
fn targets_named(rows: &[AsyncRow], name: &str) -> Option<f64> {
    targets(rows)
        .into_iter()
        .find(|t| t.figure == name)
        .map(|t| t.measured)
}
