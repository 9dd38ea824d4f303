//! The trace's records as Chrome trace-event JSON: complete slices (`X`) for commands and
//! buffers, instants (`i`), counters (`C`), flow arrows (`s`, `f`) for hazard waits
//! across queues, and metadata (`M`) naming the tracks.
//!
//! Process 1 holds the queues' tracks, process 2 the buffers', process 3 the memory
//! counters. Slices on one track never overlap without nesting: an in-order queue's
//! commands are laid one after another, and commands of an out-of-order queue that run
//! side by side go to tracks of their own under that queue.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use super::{Phase, Rec, Use, Wait};
use crate::status::{CommandKind, ExecStatus};

const COMMANDS: u32 = 1;
const BUFFERS: u32 = 2;
const MEMORY: u32 = 3;
/// Tracks per queue: an out-of-order queue's commands that overlap spread over these.
const LANES: u64 = 64;

struct Queue<'a> {
    ctx: u64,
    device: &'a str,
    in_order: bool,
    profiling: bool,
}

struct Command<'a> {
    id: u64,
    queue: u64,
    kind: u32,
    enqueued: f64,
    touches: &'a [(u64, Use)],
    waits: &'a [Wait],
    callback: Option<(f64, i32, Option<[u64; 4]>)>,
    /// When the library first read a terminal status for it, and that status (records
    /// come in time order, so the first is the earliest).
    seen: Option<(f64, i32)>,
    /// Where it was laid: track, start, end.
    slice: Option<(u64, f64, f64)>,
}

impl Command<'_> {
    /// The earlier of its end callback and the library's first terminal status read.
    fn ended(&self) -> Option<f64> {
        match (self.callback.map(|c| c.0), self.seen.map(|s| s.0)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[derive(Default)]
struct Buffer {
    ctx: u64,
    bytes: u64,
    phases: Vec<(f64, Phase)>,
    handed: Vec<(f64, String, &'static str)>,
    releases: Vec<(f64, f64, Option<usize>)>,
    freed: Option<f64>,
}

/// Writes `records` as one JSON object; `end` is the time of writing, where slices that
/// have not ended stop.
pub(super) fn write(records: &[Rec], end: f64, out: &mut impl Write) -> io::Result<()> {
    let mut queues: HashMap<u64, Queue<'_>> = HashMap::new();
    let mut commands: Vec<Command<'_>> = Vec::new();
    let mut by_id: HashMap<u64, usize> = HashMap::new();
    let mut buffers: Vec<(u64, Buffer)> = Vec::new();
    let mut buffer_at: HashMap<u64, usize> = HashMap::new();
    let mut counters: Vec<String> = Vec::new();
    for rec in records {
        match rec {
            Rec::Queue {
                id,
                ctx,
                device,
                in_order,
                profiling,
            } => {
                queues.insert(
                    *id,
                    Queue {
                        ctx: *ctx,
                        device,
                        in_order: *in_order,
                        profiling: *profiling,
                    },
                );
            }
            Rec::Command {
                id,
                queue,
                kind,
                at,
                touches,
                waits,
            } => {
                by_id.insert(*id, commands.len());
                commands.push(Command {
                    id: *id,
                    queue: *queue,
                    kind: *kind,
                    enqueued: *at,
                    touches,
                    waits,
                    callback: None,
                    seen: None,
                    slice: None,
                });
            }
            Rec::Ended {
                id,
                at,
                status,
                device,
            } => {
                if let Some(&i) = by_id.get(id) {
                    commands[i].callback = Some((*at, *status, *device));
                }
            }
            Rec::Seen { id, at, status } => {
                if let Some(&i) = by_id.get(id) {
                    commands[i].seen.get_or_insert((*at, *status));
                }
            }
            Rec::Phase {
                block,
                ctx,
                bytes,
                to,
                at,
            } => {
                let b = buffer(&mut buffers, &mut buffer_at, *block);
                b.ctx = *ctx;
                b.bytes = *bytes;
                b.phases.push((*at, *to));
            }
            Rec::HandedOut {
                block,
                site,
                source,
                at,
            } => {
                let b = buffer(&mut buffers, &mut buffer_at, *block);
                b.handed.push((*at, site.to_string(), source));
            }
            Rec::Release {
                block,
                from,
                at,
                waited_on,
            } => {
                let b = buffer(&mut buffers, &mut buffer_at, *block);
                b.releases.push((*from, *at, *waited_on));
            }
            Rec::Freed { block, at } => {
                let b = buffer(&mut buffers, &mut buffer_at, *block);
                b.freed.get_or_insert(*at);
            }
            Rec::Memory {
                ctx,
                at,
                live,
                pending,
                pooled,
            } => counters.push(format!(
                "{{\"ph\":\"C\",\"pid\":{MEMORY},\"tid\":0,\"name\":\"memory of context {ctx}\",\
                 \"ts\":{at:.3},\"args\":{{\"live\":{live},\"pending\":{pending},\"pooled\":{pooled}}}}}"
            )),
        }
    }

    let mut events: Vec<String> = Vec::new();
    for (pid, name) in [
        (COMMANDS, "commands (a track per queue)"),
        (BUFFERS, "buffers (a track per buffer)"),
        (MEMORY, "device memory"),
    ] {
        events.push(format!(
            "{{\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_name\",\"args\":{{\"name\":{}}}}}",
            string(name)
        ));
        events.push(format!(
            "{{\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{pid}}}}}"
        ));
    }
    lay_commands(&mut commands, &queues, end);
    let mut named: HashMap<u64, ()> = HashMap::new();
    for c in &commands {
        let Some((track, start, stop)) = c.slice else {
            continue;
        };
        if named.insert(track, ()).is_none() {
            let q = queues.get(&c.queue);
            let lane = track % LANES;
            let name = match q {
                Some(q) => {
                    let order = if q.in_order {
                        "in order"
                    } else {
                        "out of order"
                    };
                    let profiling = if q.profiling { ", profiling" } else { "" };
                    let lane = if lane > 0 {
                        format!(" #{lane}")
                    } else {
                        String::new()
                    };
                    format!(
                        "queue {}{lane} ({order}{profiling}), context {} on {}",
                        c.queue, q.ctx, q.device
                    )
                }
                None => format!("queue {}", c.queue),
            };
            events.push(thread_name(COMMANDS, track, &name));
        }
        events.push(command_slice(c, track, start, stop, &by_id));
    }
    let mut flow = 0u64;
    for c in &commands {
        let Some((track, start, stop)) = c.slice else {
            continue;
        };
        for w in c.waits {
            let Wait::Command(p) = w else { continue };
            let Some(p) = by_id.get(p).map(|&i| &commands[i]) else {
                continue;
            };
            let Some((p_track, p_start, p_stop)) = p.slice else {
                continue;
            };
            if p.queue == c.queue {
                continue;
            }
            flow += 1;
            // Each end at the middle of its slice, which it binds to, in the nanoseconds
            // the slice is written in: inside it, never on a neighbour's edge, for a slice
            // of 1 ns or more.
            events.push(flow_end(flow, p_track, middle(p_start, p_stop), "s"));
            events.push(flow_end(flow, track, middle(start, stop), "f"));
        }
    }
    for (block, b) in &buffers {
        buffer_events(*block, b, end, &mut events);
    }
    events.extend(counters);

    out.write_all(b"{\"traceEvents\":[\n")?;
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        out.write_all(e.as_bytes())?;
    }
    out.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"cl-lifetime\"}}\n")
}

/// The buffer `block`, added in first-seen order.
fn buffer<'b>(
    buffers: &'b mut Vec<(u64, Buffer)>,
    at: &mut HashMap<u64, usize>,
    block: u64,
) -> &'b mut Buffer {
    let i = *at.entry(block).or_insert_with(|| {
        buffers.push((block, Buffer::default()));
        buffers.len() - 1
    });
    &mut buffers[i].1
}

/// One end of a flow arrow: `s` at the command waited on, `f` at the one that waited.
fn flow_end(id: u64, track: u64, ts: String, ph: &str) -> String {
    let bind = if ph == "f" { ",\"bp\":\"e\"" } else { "" };
    format!(
        "{{\"ph\":\"{ph}\",\"pid\":{COMMANDS},\"tid\":{track},\"ts\":{ts},\"id\":{id},\
         \"name\":\"hazard wait\",\"cat\":\"hazard\"{bind}}}"
    )
}

/// Places each command on a track of its queue, from its start to its end.
fn lay_commands(commands: &mut [Command<'_>], queues: &HashMap<u64, Queue<'_>>, end: f64) {
    let mut lanes: HashMap<u64, Vec<f64>> = HashMap::new();
    let mut last_end: HashMap<u64, f64> = HashMap::new();
    for c in commands.iter_mut() {
        let in_order = queues.get(&c.queue).is_none_or(|q| q.in_order);
        let ended = c.ended().unwrap_or(end);
        let (mut start, stop) = (c.enqueued, ended);
        if let Some((_, 0, Some([_, _, started, finished]))) = c.callback {
            // The device's duration, ending when the host learnt the command had ended:
            // the device's clock has no fixed offset from the host's (PoCL's queued time
            // is not the enqueue's).
            let duration = finished.saturating_sub(started) as f64 / 1e3;
            start = (ended - duration).max(c.enqueued);
        }
        if in_order {
            let previous = last_end.entry(c.queue).or_insert(0.0);
            start = start.max(*previous).min(stop);
            *previous = stop;
        }
        let tracks = lanes.entry(c.queue).or_default();
        let lane = match tracks.iter().position(|&free_at| free_at <= start) {
            Some(lane) => lane,
            None if (tracks.len() as u64) < LANES => {
                tracks.push(start);
                tracks.len() - 1
            }
            None => tracks.len() - 1,
        };
        tracks[lane] = stop;
        c.slice = Some((c.queue * LANES + lane as u64, start, stop));
    }
}

fn command_slice(
    c: &Command<'_>,
    track: u64,
    start: f64,
    stop: f64,
    by_id: &HashMap<u64, usize>,
) -> String {
    let kind = match CommandKind::from_raw(c.kind) {
        CommandKind::Other(0) => "command".to_string(),
        CommandKind::Other(raw) => format!("command type {raw:#x}"),
        kind => format!("{kind:?}"),
    };
    // The library's own reading first: after a failure it does not take a driver's
    // "complete" on trust (NVIDIA ends some commands whose gate failed as complete).
    let status = c.seen.map(|s| s.1).or(c.callback.map(|cb| cb.1));
    let name = match (status, c.ended()) {
        (Some(s), _) if s < 0 => format!("{kind} (failed)"),
        (_, None) => format!("{kind} (not ended when written)"),
        _ => kind,
    };
    let buffers: Vec<String> = c
        .touches
        .iter()
        .map(|(b, u)| {
            string(&format!(
                "buffer {b} ({})",
                if *u == Use::Write { "write" } else { "read" }
            ))
        })
        .collect();
    let waits: Vec<String> = c
        .waits
        .iter()
        .map(|w| match w {
            Wait::Command(p) if by_id.contains_key(p) => string(&format!("command {p}")),
            Wait::Command(p) => string(&format!("command {p} (not in the trace)")),
            Wait::Other(raw) => string(&format!(
                "event {raw:#x} (a user event or another library's)"
            )),
        })
        .collect();
    let mut args = format!(
        "\"command\":{},\"queue\":{},\"buffers\":[{}],\"wait_list\":[{}],\"enqueued_us\":{:.3}",
        c.id,
        c.queue,
        buffers.join(","),
        waits.join(","),
        c.enqueued
    );
    if let Some(status) = status {
        let name = match status {
            0 => "CL_COMPLETE".to_string(),
            s => ExecStatus(s).to_string(),
        };
        let _ = write!(args, ",\"status\":{}", string(&name));
    }
    if let Some((at, _, device)) = c.callback {
        let _ = write!(args, ",\"end_callback_us\":{at:.3}");
        if let Some([q, s, st, e]) = device {
            let _ = write!(
                args,
                ",\"device_ns\":{{\"queued\":{q},\"submitted\":{s},\"started\":{st},\"ended\":{e}}}"
            );
        }
    }
    if let Some((seen, _)) = c.seen {
        let _ = write!(args, ",\"seen_ended_us\":{seen:.3}");
    }
    let (ts, dur) = span(start, stop);
    format!(
        "{{\"ph\":\"X\",\"pid\":{COMMANDS},\"tid\":{track},\"ts\":{ts},\"dur\":{dur},\
         \"name\":{},\"cat\":\"command\",\"args\":{{{args}}}}}",
        string(&name)
    )
}

/// A slice's start and duration in microseconds with three decimals, both from whole
/// nanoseconds, so that a slice that ends where the next begins is read back so.
fn span(from: f64, to: f64) -> (String, String) {
    let (from, to) = span_ns(from, to);
    (us(from), us(to - from))
}

/// A slice from `from` to `to` (µs) in whole nanoseconds, as it is written.
fn span_ns(from: f64, to: f64) -> (i64, i64) {
    let from = (from * 1e3).round() as i64;
    (from, ((to * 1e3).round() as i64).max(from))
}

/// The middle of the slice from `from` to `to` as it is written, in µs: in
/// `[start, end)` for a slice of 1 ns or more.
fn middle(from: f64, to: f64) -> String {
    let (from, to) = span_ns(from, to);
    us(from + (to - from) / 2)
}

/// Nanoseconds written as microseconds with three decimals.
fn us(ns: i64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

fn buffer_events(block: u64, b: &Buffer, end: f64, events: &mut Vec<String>) {
    let Some(&(born, _)) = b.phases.first() else {
        return;
    };
    let released = b
        .phases
        .iter()
        .find(|(_, p)| *p == Phase::Released)
        .map(|(at, _)| *at);
    let gone = released.unwrap_or(end);
    let site = b.handed.first().map_or("", |h| h.1.as_str());
    events.push(thread_name(
        BUFFERS,
        block,
        &format!("buffer {block} ({} bytes, context {})", b.bytes, b.ctx),
    ));
    let name = match released {
        Some(_) => format!("buffer {block}"),
        None => format!("buffer {block} (not released when written)"),
    };
    events.push(slice(
        BUFFERS,
        block,
        born,
        gone,
        &name,
        "buffer",
        &format!(
            "\"bytes\":{},\"context\":{},\"first_allocated_at\":{}",
            b.bytes,
            b.ctx,
            string(site)
        ),
    ));
    let phases: Vec<(f64, Phase)> = b
        .phases
        .iter()
        .take_while(|(_, p)| *p != Phase::Released)
        .copied()
        .collect();
    for (i, &(from, phase)) in phases.iter().enumerate() {
        let to = phases.get(i + 1).map_or(gone, |p| p.0);
        let (name, args) = match phase {
            Phase::Live => {
                let handed = b.handed.iter().rev().find(|h| h.0 >= from && h.0 <= to);
                let args = handed.map_or(String::new(), |h| {
                    format!("\"allocated_at\":{},\"from\":{}", string(&h.1), string(h.2))
                });
                ("held by the program", args)
            }
            Phase::Pending => ("pending release (deferred)", String::new()),
            Phase::Pooled => ("kept by a pool", String::new()),
            Phase::Released => continue,
        };
        events.push(slice(BUFFERS, block, from, to, name, "phase", &args));
    }
    for &(from, at, waited_on) in &b.releases {
        let (name, args) = match waited_on {
            Some(n) => (
                format!("release (waited on {n} commands)"),
                format!("\"waited_on\":{n}"),
            ),
            None => (
                "deferred release (its commands had ended)".to_string(),
                String::new(),
            ),
        };
        events.push(slice(BUFFERS, block, from, at, &name, "release", &args));
    }
    for &(at, _, source) in &b.handed {
        if source != "driver" {
            events.push(instant(block, at, &format!("handed out again ({source})")));
        }
    }
    if let Some(at) = released {
        events.push(instant(block, at, "clReleaseMemObject"));
    }
    if let Some(at) = b.freed {
        events.push(instant(block, at, "memory freed (destructor callback)"));
    }
}

fn slice(pid: u32, tid: u64, from: f64, to: f64, name: &str, cat: &str, args: &str) -> String {
    let (ts, dur) = span(from, to);
    format!(
        "{{\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{ts},\"dur\":{dur},\"name\":{},\
         \"cat\":\"{cat}\",\"args\":{{{args}}}}}",
        string(name)
    )
}

fn instant(block: u64, at: f64, name: &str) -> String {
    format!(
        "{{\"ph\":\"i\",\"s\":\"t\",\"pid\":{BUFFERS},\"tid\":{block},\"ts\":{at:.3},\"name\":{}}}",
        string(name)
    )
}

fn thread_name(pid: u32, tid: u64, name: &str) -> String {
    format!(
        "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{\"name\":{}}}}}",
        string(name)
    )
}

/// `s` as a JSON string.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_that_ends_where_the_next_begins_is_written_so() {
        let (a, b, c) = (1.23456, 7.0004999, 9.5);
        let (ts, dur) = span(a, b);
        let (next, _) = span(b, c);
        assert_eq!(
            (ts.as_str(), dur.as_str(), next.as_str()),
            ("1.235", "5.765", "7.000")
        );
        assert_eq!(span(5.0, 4.0).1, "0.000", "never negative");
    }

    #[test]
    fn strings_are_escaped_as_json_requires() {
        assert_eq!(string("a\"b\\c\nd\u{1}é"), "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }

    /// Queue 7, in order or not, profiling or not.
    fn queue_7(in_order: bool, profiling: bool) -> HashMap<u64, Queue<'static>> {
        HashMap::from([(
            7,
            Queue {
                ctx: 1,
                device: "d",
                in_order,
                profiling,
            },
        )])
    }

    /// A command of queue 7 enqueued at `enqueued`, its end callback and status read as
    /// given.
    fn command(
        id: u64,
        enqueued: f64,
        callback: Option<(f64, i32, Option<[u64; 4]>)>,
        seen: Option<f64>,
    ) -> Command<'static> {
        Command {
            id,
            queue: 7,
            kind: 0,
            enqueued,
            touches: &[],
            waits: &[],
            callback,
            seen: seen.map(|at| (at, 0)),
            slice: None,
        }
    }

    #[test]
    fn an_in_order_queues_commands_are_laid_one_after_another_on_one_track() {
        // Both enqueued before the first ended.
        let mut commands = vec![
            command(1, 0.0, Some((10.0, 0, None)), None),
            command(2, 1.0, Some((15.0, 0, None)), None),
        ];
        lay_commands(&mut commands, &queue_7(true, false), 100.0);
        assert_eq!(commands[0].slice, Some((7 * LANES, 0.0, 10.0)));
        assert_eq!(commands[1].slice, Some((7 * LANES, 10.0, 15.0)));
    }

    #[test]
    fn a_profiled_command_lasts_its_device_duration_and_ends_when_the_host_learnt_it_had() {
        // Queued 150 µs before it started on the device's clock, 5 µs long, though the
        // host saw it end 10 µs after the enqueue.
        let device = [1_000_000, 1_000_100, 1_150_000, 1_155_000];
        let mut commands = vec![command(
            1,
            100.0,
            Some((110.0, 0, Some(device))),
            Some(112.0),
        )];
        lay_commands(&mut commands, &queue_7(true, true), 1000.0);
        assert_eq!(commands[0].slice, Some((7 * LANES, 105.0, 110.0)));
    }

    #[test]
    fn an_out_of_order_queues_overlapping_commands_get_tracks_of_their_own() {
        let mut commands = vec![
            command(1, 0.0, None, Some(10.0)),
            command(2, 1.0, None, Some(5.0)),
            command(3, 11.0, None, Some(12.0)),
        ];
        lay_commands(&mut commands, &queue_7(false, false), 100.0);
        let tracks: Vec<u64> = commands.iter().map(|c| c.slice.unwrap().0).collect();
        assert_eq!(tracks, [7 * LANES, 7 * LANES + 1, 7 * LANES]);
    }
}
