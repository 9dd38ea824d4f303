//! The lifetime trace (`cl_lifetime::trace`): a small scripted run is traced, and the JSON
//! file read back. The trace is the process's, so each test runs in a child process.

use std::collections::HashMap;
use std::path::Path;

use cl_lifetime::{Pool, PoolOptions, QueueOptions, SvmKind};
use serde_json::Value;

use crate::common;

/// Two queues (one profiling) and an out-of-order one, two buffers handed between them,
/// a blocking and a deferred release, and a pool block reused across queues; where the
/// device reports SVM, two SVM allocations the same way. Returns whether it did.
fn scripted_run(path: &Path) -> bool {
    let Some(ctx) = common::context() else {
        return false;
    };
    cl_lifetime::trace::start(path).expect("the trace starts");
    let a = ctx.queue().expect("the scripted run");
    let b = ctx
        .queue_with(QueueOptions::default().profiling(true))
        .expect("the scripted run");
    let ooo = ctx.out_of_order_queue().expect("the scripted run");
    let n = 1 << 16;
    let x = ctx.buffer::<u32>(n).expect("the scripted run");
    let y = ctx.buffer::<u32>(n).expect("the scripted run");
    // The first fill waits on a gate until the two commands after it are enqueued, so
    // that both hazard waits are in their wait lists however the machine is loaded (a
    // command seen ended needs no wait, and shows none). Not on Oclgrind, which runs a
    // queue at its flush and would wait there for the gate.
    let gate = ctx.user_event().expect("the scripted run");
    let gated = [gate.event()];
    let deps: &[&cl_lifetime::Event] = if common::on_platform(&ctx, &["oclgrind"]) {
        &[]
    } else {
        &gated
    };
    a.after(deps).fill(&x, 3).expect("the scripted run");
    // Read after write on another queue: a hazard wait, twice.
    b.copy(&x, &y).expect("the scripted run");
    let read = a.read_owned(&y).expect("the scripted run");
    gate.complete().expect("the scripted run");
    ooo.fill_range(&x, 4, 0..16).expect("the scripted run");
    ooo.fill_range(&x, 5, 16..32).expect("the scripted run");
    assert_eq!(read.wait().expect("the scripted run"), vec![3; n]);
    x.release().expect("the scripted run");
    y.release_deferred();
    let svm = ctx.device().supports_svm(SvmKind::Coarse);
    if svm {
        let s = ctx
            .svm::<u32>(n, SvmKind::Coarse)
            .expect("the scripted run");
        let t = ctx
            .svm::<u32>(n, SvmKind::Coarse)
            .expect("the scripted run");
        a.fill_svm(&s, 6).expect("the scripted run");
        b.copy_svm(&s, &t).expect("the scripted run");
        s.release().expect("the scripted run");
        t.release_deferred();
    }
    let pool = Pool::new(&ctx, PoolOptions::default()).expect("the scripted run");
    let p = pool.acquire::<u32>(1024).expect("the scripted run");
    b.fill(&p, 1).expect("the scripted run");
    drop(p);
    let p = pool.acquire::<u32>(1024).expect("the scripted run");
    a.fill(&p, 2).expect("the scripted run");
    drop(p);
    drop(pool);
    drop((a, b, ooo));
    ctx.wait_deferred();
    drop(ctx);
    assert_eq!(
        cl_lifetime::trace::finish().expect("the trace is written"),
        Some(path.to_path_buf())
    );
    svm
}

fn events(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("the trace file");
    let json: Value = serde_json::from_str(&text).expect("the trace is JSON");
    json["traceEvents"]
        .as_array()
        .expect("a traceEvents array")
        .clone()
}

/// The commands' slices.
fn command_slices(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "command")
        .collect()
}

fn f(e: &Value, key: &str) -> f64 {
    e[key].as_f64().unwrap_or_else(|| panic!("{key} of {e}"))
}

fn end(e: &Value) -> f64 {
    f(e, "ts") + f(e, "dur")
}

fn trace_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cl-lifetime-{name}-{}.json", std::process::id()))
}

isolated_test! {
    fn every_buffer_of_a_traced_run_lives_until_every_command_that_touched_it_has_ended() {
        let path = trace_path("lifetimes");
        let svm = scripted_run(&path);
        let events = events(&path);
        let commands = command_slices(&events);
        // Each buffer's outer slice, by its track (the buffer's number).
        let buffers: HashMap<u64, &Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "buffer")
            .map(|e| (e["tid"].as_u64().unwrap(), e))
            .collect();
        assert!(buffers.len() >= 3, "buffers x, y and the pool's block: {buffers:?}");
        let mut checked = 0;
        for c in &commands {
            for touched in c["args"]["buffers"].as_array().unwrap() {
                let touched = touched.as_str().unwrap();
                let id: u64 = touched
                    .strip_prefix("buffer ")
                    .and_then(|t| t.split(' ').next())
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| panic!("a buffer named as {touched}"));
                let buffer = buffers
                    .get(&id)
                    .unwrap_or_else(|| panic!("no track for buffer {id}, touched by {c}"));
                assert!(
                    !buffer["name"].as_str().unwrap().contains("not released"),
                    "{buffer}"
                );
                assert!(
                    end(buffer) >= end(c),
                    "buffer {id} released at {} µs, before its command ended at {} µs: {c}",
                    end(buffer),
                    end(c)
                );
                checked += 1;
            }
        }
        // Fills of x (3), the copy (2), the read, fills of the pool's block (2); with SVM
        // its fill and copy (3).
        let least = if svm { 11 } else { 8 };
        assert!(checked >= least, "{checked} command-buffer pairs checked");
        // The profiling queue's commands carry the device's times.
        assert!(
            commands.iter().any(|c| c["args"]["device_ns"].is_object()),
            "no command with device times"
        );
        std::fs::remove_file(&path).unwrap();
    }
}

isolated_test! {
    fn the_memory_counters_of_a_traced_run_return_to_zero() {
        let path = trace_path("counters");
        scripted_run(&path);
        let events = events(&path);
        let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
        assert!(!counters.is_empty(), "no counter events");
        let peak = counters
            .iter()
            .map(|c| c["args"]["live"].as_u64().unwrap())
            .max()
            .unwrap();
        assert!(peak >= (2 * 4) << 16, "x and y live together: peak {peak}");
        assert!(
            counters
                .iter()
                .any(|c| c["args"]["pending"].as_u64().unwrap() > 0),
            "y's deferred release is counted as pending"
        );
        assert!(
            counters
                .iter()
                .any(|c| c["args"]["pooled"].as_u64().unwrap() > 0),
            "the pool's block is counted as pooled"
        );
        let last = counters
            .iter()
            .max_by(|a, b| f(a, "ts").total_cmp(&f(b, "ts")))
            .unwrap();
        for series in ["live", "pending", "pooled"] {
            assert_eq!(last["args"][series], 0, "{series} at the end: {last}");
        }
        std::fs::remove_file(&path).unwrap();
    }
}

isolated_test! {
    fn every_hazard_wait_in_a_trace_joins_two_commands_on_different_queues() {
        let path = trace_path("flows");
        scripted_run(&path);
        let events = events(&path);
        let commands = command_slices(&events);
        // The command slice a flow's end binds to: the one on its track around its time,
        // in the whole nanoseconds the trace is written in (`[start, end)`, or the instant
        // of a slice of no length).
        let ns = |x: f64| (x * 1e3).round() as i64;
        let command_at = |flow: &Value| -> &Value {
            let (tid, ts) = (&flow["tid"], ns(f(flow, "ts")));
            let around = |c: &&Value| {
                let (start, stop) = (ns(f(c, "ts")), ns(f(c, "ts")) + ns(f(c, "dur")));
                start <= ts && (ts < stop || start == stop)
            };
            let found: Vec<&&Value> = commands
                .iter()
                .filter(|c| c["tid"] == *tid && around(c))
                .collect();
            assert_eq!(found.len(), 1, "flow end {flow} binds to {found:?}");
            found[0]
        };
        let mut ends: HashMap<u64, (Option<&Value>, Option<&Value>)> = HashMap::new();
        for e in events.iter().filter(|e| e["cat"] == "hazard") {
            let slot = ends.entry(e["id"].as_u64().unwrap()).or_default();
            match e["ph"].as_str().unwrap() {
                "s" => slot.0 = Some(e),
                "f" => slot.1 = Some(e),
                other => panic!("a hazard event of phase {other}: {e}"),
            }
        }
        // x's fill (queue a) before the copy (queue b), the copy before the read (a).
        assert!(ends.len() >= 2, "{} hazard waits shown", ends.len());
        for (id, (start, finish)) in ends {
            let (Some(start), Some(finish)) = (start, finish) else {
                panic!("flow {id} has one end only");
            };
            let (waited_on, waiting) = (command_at(start), command_at(finish));
            assert_ne!(
                waited_on["args"]["queue"], waiting["args"]["queue"],
                "flow {id} joins two commands of one queue: {waited_on} and {waiting}"
            );
            let named = format!("command {}", waited_on["args"]["command"]);
            assert!(
                waiting["args"]["wait_list"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|w| *w == named.as_str()),
                "flow {id}: {waiting} does not wait on {named}"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
}

isolated_test! {
    fn a_trace_turned_on_by_its_variable_is_written_when_the_last_context_is_dropped() {
        // The child's environment: set before any context exists.
        let path = trace_path("from-env");
        // SAFETY: the child process runs this one test, on this thread, before anything
        // reads the environment concurrently.
        unsafe { std::env::set_var(cl_lifetime::trace::TRACE_VAR, &path) };
        let ctx = device!();
        let other = ctx.clone();
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer::<u32>(64).unwrap();
        queue.fill(&buf, 1).unwrap().wait().unwrap();
        drop((buf, queue, ctx));
        assert!(cl_lifetime::trace::is_on());
        let before = std::fs::metadata(&path).unwrap().len();
        assert_eq!(before, 0, "written before the last context was dropped");
        drop(other);
        let events = events(&path);
        assert!(
            events.iter().any(|e| e["cat"] == "command"),
            "no command in {events:?}"
        );
        std::fs::remove_file(&path).unwrap();
    }
}

isolated_test! {
    fn a_command_failed_by_its_gate_shows_as_failed_in_the_trace() {
        let path = trace_path("failed");
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        cl_lifetime::trace::start(&path).unwrap();
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer::<u32>(64).unwrap();
        let gate = ctx.user_event().unwrap();
        let fill = queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
        gate.fail(-1234).unwrap();
        assert!(fill.wait().is_err());
        drop(fill);
        drop((buf, queue, gate, ctx));
        cl_lifetime::trace::finish().unwrap();
        let events = events(&path);
        let fills: Vec<&Value> = command_slices(&events)
            .into_iter()
            .filter(|c| c["name"].as_str().unwrap().starts_with("Fill"))
            .collect();
        assert_eq!(fills.len(), 1, "{fills:?}");
        assert_eq!(fills[0]["name"], "Fill (failed)", "{}", fills[0]);
        // The status a driver gives a command whose gate failed is its own (PoCL: -1).
        let status = fills[0]["args"]["status"].as_str().unwrap();
        assert!(status.starts_with("execution status -"), "{}", fills[0]);
        // The gate is named as an event, not as a command.
        let waits = fills[0]["args"]["wait_list"].as_array().unwrap();
        assert!(
            waits.len() == 1 && waits[0].as_str().unwrap().starts_with("event "),
            "{}",
            fills[0]
        );
        std::fs::remove_file(&path).unwrap();
    }
}

// A command of a finished trace that ended later was recorded in the next trace under the
// same id: that trace's own command with the id, which had not run, showed as complete.
isolated_test! {
    fn a_command_of_a_finished_trace_that_ends_later_is_not_in_the_next_trace() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let (first, second) = (trace_path("first"), trace_path("second"));
        let (queue, other) = (ctx.queue().unwrap(), ctx.queue().unwrap());
        let (old, new) = (ctx.buffer::<u32>(64).unwrap(), ctx.buffer::<u32>(64).unwrap());
        cl_lifetime::trace::start(&first).unwrap();
        let gate = ctx.user_event().unwrap();
        let gated = queue.after(&[gate.event()]).fill(&old, 1).unwrap();
        queue.flush().unwrap();
        cl_lifetime::trace::finish().unwrap();
        cl_lifetime::trace::start(&second).unwrap();
        let later = ctx.user_event().unwrap();
        let fill = other.after(&[later.event()]).fill(&new, 2).unwrap();
        other.flush().unwrap();
        // The first trace's command ends while the second's has not run.
        gate.complete().unwrap();
        queue.finish().unwrap();
        cl_lifetime::trace::finish().unwrap();
        later.complete().unwrap();
        fill.wait().unwrap();
        drop((fill, later, gated, gate, queue, other, old, new, ctx));
        let events = events(&second);
        let fills: Vec<&Value> = command_slices(&events)
            .into_iter()
            .filter(|c| c["name"].as_str().unwrap().starts_with("Fill"))
            .collect();
        assert!(
            fills.iter().all(|f| f["args"]["status"] != "CL_COMPLETE"),
            "a command that had not run shows as complete: {fills:?}"
        );
        // And no id of the first trace is used again in the second.
        let ids = |events: &[Value]| -> Vec<u64> {
            events
                .iter()
                .filter_map(|e| e["args"]["command"].as_u64())
                .collect()
        };
        let (old_ids, new_ids) = (ids(&self::events(&first)), ids(&events));
        assert!(!old_ids.is_empty(), "the first trace has no command");
        assert!(
            new_ids.iter().all(|id| !old_ids.contains(id)),
            "ids reused: {old_ids:?} then {new_ids:?}"
        );
        std::fs::remove_file(&first).unwrap();
        std::fs::remove_file(&second).unwrap();
    }
}

isolated_test! {
    fn a_written_trace_has_beside_it_a_page_that_holds_the_same_trace() {
        let path = trace_path("page");
        scripted_run(&path);
        let json = std::fs::read_to_string(&path).expect("the trace file");
        let page_path = cl_lifetime::trace::viewer_path(&path);
        assert_eq!(page_path.extension().and_then(|e| e.to_str()), Some("html"));
        let page = std::fs::read_to_string(&page_path).expect("the viewer page beside it");
        // The trace is in the page's trace element, as JSON the page parses back.
        let start = page.find(r#"<script id="trace" type="application/json">"#).unwrap();
        let body = &page[start..];
        let body = &body[body.find('>').unwrap() + 1..body.find("</script>").unwrap()];
        let embedded: Value = serde_json::from_str(&body.replace(r"<\/", "</")).unwrap();
        let written: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(embedded, written);
        assert!(!page.contains(r#"{"traceEvents":[]}"#), "the page's empty trace is left");
    }
}
