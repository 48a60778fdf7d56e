//! The `softtimers` command, run as a user would.

mod support;

use support::{refused, scratch, softtimers, succeeded};

#[test]
fn unknown_flags_and_commands_are_clear_errors() {
    refused(&["lab --bogus", "bench nonsense", "frobnicate"]);
}

#[test]
fn an_unwritable_output_is_an_error_not_a_panic() {
    let out = softtimers(&["info", "--json", "/nonexistent-dir/x.json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn info_reports_the_clock() {
    let dir = scratch("info");
    let json = dir.join("info.json");
    let out = softtimers(&["info", "--json", json.to_str().unwrap()]);
    succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(["tsc", "monotonic"].contains(&v["clock_source"].as_str().unwrap()));
    assert!(v["measure_resolution_hz"].as_u64().unwrap() >= 1_000_000);
    assert_eq!(v["interrupt_clock_resolution_hz"], 1000);
    assert!(v["clock_read_ns"].as_f64().unwrap() > 0.0);
    // The wake-up floor: lateness and CPU per wake-up at normal priority, and under
    // SCHED_FIFO or why not.
    for field in ["wakeup_late_p50_us", "wakeup_late_p99_us", "wakeup_cpu_us"] {
        assert!(v["normal"][field].as_f64().unwrap() >= 0.0, "{field}: {v}");
        assert!(
            v["fifo"][field].as_f64().is_some() || v["fifo_refused"].is_string(),
            "{v}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `bench core --quick` writes the table and a JSON with every field the report reads, for
/// every implementation, pending count and operation.
#[test]
fn bench_core_quick_writes_every_column() {
    let dir = scratch("core");
    let json = dir.join("core.json");
    let out = softtimers(&["bench", "core", "--quick", "--json", json.to_str().unwrap()]);
    succeeded(&out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| schedule_fire | 1000000 |"), "{table}");

    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["clock_read_ns"].as_f64().unwrap() > 0.0);
    let rows = v["rows"].as_array().unwrap();
    for implementation in ["softtimer", "binary_heap", "btree_map", "tokio_delay_queue"] {
        for pending in [1_000u64, 1_000_000] {
            for op in ["trigger", "schedule", "cancel", "schedule_fire"] {
                let row = rows
                    .iter()
                    .find(|r| {
                        r["impl"] == implementation && r["pending"] == pending && r["op"] == op
                    })
                    .unwrap_or_else(|| panic!("no row {implementation} {pending} {op}"));
                let median = row["median_ns"].as_f64().unwrap();
                let p99 = row["p99_ns"].as_f64().unwrap();
                assert!(median > 0.0 && p99 >= median, "{row}");
            }
        }
    }
    let memory = v["memory"].as_array().unwrap();
    assert!(
        memory
            .iter()
            .any(|m| m["impl"] == "softtimer" && m["bytes_per_event"].as_f64().unwrap() > 0.0),
        "the counting allocator is installed in the binary"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `--slot-ticks` rounds down to a power of two as its help says (3 panicked in the
/// facility's config check), and refuses widths that would make the benchmark quadratic.
#[test]
fn bench_core_takes_any_slot_width_in_its_range() {
    for bad in ["0", "65537", "4294967296", "-1"] {
        refused(&[&format!("bench core --quick --slot-ticks {bad}")]);
    }
    succeeded(&softtimers(&[
        "bench",
        "core",
        "--quick",
        "--slot-ticks",
        "3",
    ]));
}

#[test]
fn bench_timers_rejects_bad_intervals() {
    for bad in ["0", "3600000001", "-5", "ten"] {
        refused(&[&format!("bench timers --quick --interval {bad}")]);
    }
}

/// `bench timers --quick` (one interval, to keep the test short) writes every field the
/// report reads, for every source.
#[test]
fn bench_timers_quick_writes_every_column() {
    let dir = scratch("timers");
    let json = dir.join("timers.json");
    let out = softtimers(&[
        "bench",
        "timers",
        "--quick",
        "--interval",
        "50",
        "--json",
        json.to_str().unwrap(),
    ]);
    succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["trigger_states_per_s"].as_f64().unwrap() > 1000.0);
    let rows = v["rows"].as_array().unwrap();
    for source in ["soft", "timerfd", "signal"] {
        let row = rows
            .iter()
            .find(|r| r["source"] == source && r["interval_us"] == 50)
            .unwrap_or_else(|| panic!("no row for {source}"));
        for field in [
            "events_asked_per_s",
            "events_delivered_per_s",
            "slowdown_pct",
            "cost_per_event_us",
        ] {
            assert!(row[field].is_number(), "{source}: {field} missing in {row}");
        }
        assert_eq!(row["events_asked_per_s"], 20_000.0);
        // Every source delivers events (a real run, not an empty table).
        assert!(
            row["events_delivered_per_s"].as_f64().unwrap() > 1_000.0,
            "{row}"
        );
    }
    // The backstop's wake-up states count the timer machinery's system calls on the loop's
    // core; the idle policy runs at periods from 100 µs to 10 ms, each row placed against
    // the others of its period.
    for w in v["backstop_wakeups_per_s"].as_array().unwrap() {
        assert!(w["loop_core_syscalls_per_s"].is_number(), "{w}");
    }
    let idle = v["idle_policy"].as_array().unwrap();
    for period in [100, 1000, 10_000] {
        let of_period: Vec<&serde_json::Value> =
            idle.iter().filter(|r| r["period_us"] == period).collect();
        assert!(
            of_period.iter().any(|r| r["policy"] == "calibrated")
                && of_period.iter().any(|r| r["policy"] == "window"),
            "{period}: {of_period:?}"
        );
        for r in of_period {
            let by = &r["dominated_by"];
            assert!(by.is_null() || by.is_string(), "{r}");
            assert!(r["late_max_us"].as_f64().unwrap() >= r["late_p99_us"].as_f64().unwrap());
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
