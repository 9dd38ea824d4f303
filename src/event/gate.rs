//! Gates: user events that only the library sets.
//!
//! # Rules
//!
//! - **Raw handles.** A driver that never runs a command whose wait list holds a failed
//!   event (PoCL leaves it queued for good, and its in-order queue with it) must never
//!   be handed such a list, yet the library reads its dependencies' statuses before the
//!   enqueue; the gates' *no failure mid-enqueue* rule closes that window for a gate
//!   failed through the library, not for an event that other code sets. So no command
//!   of the library ever waits on an event that other code can set or fail:
//!   - a gate's public handle ([`Event::as_raw`] of a [`UserEvent`]'s event) is its
//!     *twin*, a user event of its own made on demand; other code may wait on it or set
//!     it, and the waiter, seeing it set, sets the gate itself through the library
//!     ([`Gate::set_status`]); setting the gate sets the twin too;
//!   - a foreign event (adopted with [`Event::from_raw`]) that has not ended is stood in
//!     for, in the wait lists of the library's commands, by a *proxy* gate that the
//!     waiter sets as the foreign event ends, with its status.
//!
//!   A twin or a proxy is followed from the waiter's poller (and, for a foreign command,
//!   from a blocker where waits sleep): a raw set is seen within a poll pause.

use super::*;
use crate::core::gates;
use crate::core::waiter::{Order, Watch, waiter};

/// A user event that only the library sets.
pub(crate) struct Gate {
    pub(crate) event: Event,
    /// Set once the gate is set: shared with the waiter, which reads the commands held
    /// behind the gate at its longest pause until then (its *held* rule).
    set: Arc<AtomicBool>,
    id: u64,
    gates: Arc<OpenGates>,
    /// Where it was created, for the log.
    pub(crate) site: &'static std::panic::Location<'static>,
    /// Held while the twin is made, and while a set gate sets its twin: a twin made
    /// while the gate is set is set by it.
    twin: Mutex<(), rank::Twin>,
    /// The commands it stands for, when it is a hand-over gate ([`Gate::after_all`]):
    /// a cross-queue wait on the gate flushes their queues.
    stands_for: OnceLock<Weak<Joiner>>,
}

impl Gate {
    /// A new gate of `context`, counted among its open `gates` as `id`.
    pub(crate) fn new(
        context: cl_context,
        gates: &Arc<OpenGates>,
        id: u64,
        site: &'static std::panic::Location<'static>,
    ) -> Result<Arc<Gate>> {
        let raw = ffi::create_user_event(context)?;
        // A user event exists: it can be failed without the library.
        note_failure_possible();
        if crate::trace::on() {
            crate::trace::not_a_command(raw);
        }
        gates.opened(id, site);
        Ok(Arc::new_cyclic(|weak| Gate {
            // `raw` was just created in `context`; its one reference is the event's.
            event: Event {
                inner: Arc::new(EventInner::unqueued(
                    raw,
                    context,
                    Origin::Gate(weak.clone()),
                )),
            },
            set: Arc::new(AtomicBool::new(false)),
            id,
            gates: gates.clone(),
            site,
            twin: Mutex::new(()),
            stands_for: OnceLock::new(),
        }))
    }

    /// A gate of `context` that follows the foreign event `source`: set, with its
    /// status, once it has ended (the *raw handles* rule).
    pub(crate) fn following(
        source: cl_event,
        context: cl_context,
        gates: &Arc<OpenGates>,
    ) -> std::result::Result<Arc<Gate>, String> {
        let proxy = Gate::new(
            context,
            gates,
            crate::util::next_id(),
            std::panic::Location::caller(),
        )
        .map_err(|e| e.to_string())?;
        // A foreign command (not a user event) ends without the program's help.
        let on_its_own = ffi::command_type(source).is_ok_and(|t| t != CL_COMMAND_USER);
        if let Err(e) = proxy.follow(source, on_its_own) {
            // Set, so that it is not left open.
            let _ = proxy.set_status(ffi::codes::CL_INVALID_OPERATION);
            return Err(e);
        }
        Ok(proxy)
    }

    /// The handle the program knows it by, for the log: its twin once made.
    pub(crate) fn shown(&self) -> cl_event {
        let inner = &self.event.inner;
        inner
            .stand_in
            .get()
            .and_then(Option::as_ref)
            .map_or(inner.raw.raw(), StandIn::raw)
    }

    /// The flag set once the gate is set, for the waiter (its *held* rule).
    pub(crate) fn set_flag(&self) -> &Arc<AtomicBool> {
        &self.set
    }

    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Has the waiter set this gate as `source` ends.
    fn follow(
        self: &Arc<Gate>,
        source: cl_event,
        on_its_own: bool,
    ) -> std::result::Result<(), String> {
        // SAFETY: `source` is a live event (the caller's); each handle below takes a
        // reference of its own.
        let (watched, followed) = unsafe { (RawEvent::retain(source), RawEvent::retain(source)) };
        let (watched, followed) = (
            watched.map_err(|e| e.to_string())?,
            followed.map_err(|e| e.to_string())?,
        );
        let waker = std::task::Waker::from(Arc::new(Follower {
            source: followed,
            gate: self.clone(),
        }));
        wake_when_ended(
            watched,
            &waker,
            self.event.inner.context.raw(),
            on_its_own,
            &self.gates,
        )
    }

    /// The handle other code gets: the twin, made at the first call (the *raw
    /// handles* rule); the gate's own handle once it is set, or where no twin can
    /// be made.
    pub(crate) fn public_handle(self: &Arc<Gate>) -> cl_event {
        let inner = &self.event.inner;
        let _making = self.twin.lock();
        let stand_in = inner.stand_in.get_or_init(|| {
            if self.is_set() {
                return None;
            }
            match self.make_twin() {
                Ok(twin) => Some(StandIn::Twin(twin)),
                Err(e) => {
                    log::warn!(target: "cl_lifetime::event", "no twin for the user event {:p} ({e}); its own handle is handed out, and a failure set through it is not covered", inner.raw.raw());
                    None
                }
            }
        });
        stand_in.as_ref().map_or(inner.raw.raw(), StandIn::raw)
    }

    fn make_twin(self: &Arc<Gate>) -> std::result::Result<RawEvent, String> {
        let raw =
            ffi::create_user_event(self.event.inner.context.raw()).map_err(|e| e.to_string())?;
        // SAFETY: `raw` was just created; its one reference is the twin's.
        let twin = unsafe { RawEvent::from_raw(raw) };
        if crate::trace::on() {
            crate::trace::not_a_command(raw);
        }
        if let Err(e) = self.follow(raw, false) {
            let _ = ffi::set_user_event_status(raw, ffi::codes::CL_INVALID_OPERATION);
            return Err(e);
        }
        Ok(twin)
    }

    /// Sets the gate through the library: the gates' *no failure mid-enqueue* rule,
    /// the waiter's kick, and the twin.
    pub(crate) fn set_status(&self, status: cl_int) -> Result<()> {
        self.set_status_kicked(status).0
    }

    /// Sets the gate as [`Gate::set_status`] does, then reads the commands behind it on
    /// this thread until the waiter's poller is awake (the waiter's *read where set* rule):
    /// for the program's own calls ([`UserEvent::complete`](crate::UserEvent::complete),
    /// [`fail`](crate::UserEvent::fail)), which hold no lock of the library, since the
    /// tasks of the commands that end are woken here.
    pub(crate) fn set_status_here(&self, status: cl_int) -> Result<()> {
        let (set, kick) = self.set_status_kicked(status);
        self.gates.read_where_set(kick);
        set
    }

    /// [`Gate::set_status`], with the waiter's kick.
    fn set_status_kicked(&self, status: cl_int) -> (Result<()>, Option<u64>) {
        if self.set.swap(true, Ordering::AcqRel) {
            let refused = Error::cl("clSetUserEventStatus", ffi::codes::CL_INVALID_OPERATION);
            return (Err(refused), None);
        }
        if status < 0 {
            // Noted before the driver propagates it, so no enqueue that follows misses it.
            self.gates.note_failure();
        }
        // The gates' *one set at a time* rule.
        let set_now =
            || gates::one_set_at_a_time(|| ffi::set_user_event_status(self.event.raw(), status));
        let set = if status < 0 {
            // The gates' *no failure mid-enqueue* rule.
            gates::failing(set_now)
        } else {
            set_now()
        };
        let kick = self.gates.closed(self.id);
        {
            let _twin = self.twin.lock();
            if let Some(Some(StandIn::Twin(twin))) = self.event.inner.stand_in.get() {
                // Refused when other code set it first: that set is what this follows.
                let _ = ffi::set_user_event_status(twin.raw(), status);
            }
        }
        // Failed events that waited on this gate may be free to go now.
        graveyard::sweep();
        (set, kick)
    }

    /// Sets the gate as its twin was set, if it was (a `UserEvent` dropped before the
    /// waiter saw the twin set).
    pub(crate) fn follow_twin_now(&self) {
        if self.is_set() {
            return;
        }
        if let Some(Some(StandIn::Twin(twin))) = self.event.inner.stand_in.get() {
            follow_status(self, twin.raw());
        }
    }
}

impl Gate {
    /// A gate of `context` that the waiter sets complete once every command of `events`
    /// has ended in the driver, whatever its status, holding `keep` until then (the
    /// pool's *clean hand-over* rule): a command behind it runs after them, and never
    /// fails with them. It is not counted among the context's open `gates`. `Err` when
    /// the waiter could not watch the commands: nothing waits on the gate then.
    pub(crate) fn after_all(
        events: Vec<Event>,
        context: cl_context,
        gates: &Arc<OpenGates>,
        keep: Box<dyn std::any::Any + Send>,
        site: &'static std::panic::Location<'static>,
    ) -> std::result::Result<Arc<Gate>, String> {
        // Not one of the context's open gates: the library sets it, once commands end
        // that wait, at most, on gates that are counted there.
        let uncounted = Arc::new(OpenGates::default());
        let gate = Gate::new(context, &uncounted, crate::util::next_id(), site)
            .map_err(|e| e.to_string())?;
        let joiner = Arc::new(Joiner {
            gate: gate.clone(),
            gates: gates.clone(),
            left: Mutex::new(Some((events, keep))),
        });
        let _ = gate.stands_for.set(Arc::downgrade(&joiner));
        if let Err(e) = joiner.next() {
            // Set, so that it is not left open; no command waits on it yet.
            let _ = gate.set_status(ffi::codes::CL_INVALID_OPERATION);
            return Err(e);
        }
        Ok(gate)
    }
}

/// The commands a [`Joiner`] has not seen end yet, and what it holds until they have.
type Left = (Vec<Event>, Box<dyn std::any::Any + Send>);

/// The waker of [`Gate::after_all`]: watches its commands one at a time and sets the
/// gate complete once none is left.
struct Joiner {
    gate: Arc<Gate>,
    /// The context's open gates, which the commands may wait behind.
    gates: Arc<OpenGates>,
    /// The commands not seen ended yet, and what is held until they have; `None` once
    /// the gate is set.
    left: Mutex<Option<Left>, rank::Joiner>,
}

impl Gate {
    /// Flushes the queues of the commands a hand-over gate stands for, so that they
    /// start without a later flush (design trap "flush before a cross-queue wait"): a
    /// command about to wait on the gate from another queue, or a release, asks it.
    /// Not at the hand-over: where a flush runs a queue's commands itself (Oclgrind), it
    /// would wait there for a gate in front of them.
    pub(crate) fn flush_stood_for(&self) -> Result<()> {
        let Some(joiner) = self.stands_for.get().and_then(Weak::upgrade) else {
            return Ok(());
        };
        let events: Vec<Event> = match joiner.left.lock().as_ref() {
            Some((events, _)) => events.clone(),
            None => return Ok(()),
        };
        events.iter().try_for_each(Event::flush_producer)
    }
}

impl Joiner {
    /// Opens the gate, and kicks the waiter for the context's gates: the commands behind
    /// the gate are watched under those (a new owner's awaited command, the next
    /// hand-over's joiner), not under the gate's own, so without the kick each link of
    /// a chain of hand-overs would wait for a poll pause.
    fn set_now(&self) {
        let _ = self.gate.set_status(ffi::CL_COMPLETE);
        let _ = waiter().kick(&self.gates);
    }

    /// Has the waiter watch the first command not ended, or sets the gate when there
    /// is none.
    fn next(self: &Arc<Self>) -> std::result::Result<(), String> {
        // The commands seen ended, let go of after the lock: the last reference to a
        // command may be the last to its queue, whose drop takes locks ranked before
        // this one (in a debug build the rank check panicked there, on the waiter's
        // thread, and the gate never opened).
        let ended: Vec<Event>;
        let pending = {
            let mut left = self.left.lock();
            let Some((events, _)) = left.as_mut() else {
                return Ok(());
            };
            // The driver's own status: a command the library counts as failed may still
            // run (NVIDIA), and the gate must not open before it ends.
            let (still, done): (Vec<Event>, Vec<Event>) = std::mem::take(events)
                .into_iter()
                .partition(|e| ffi::execution_status(e.raw()).is_ok_and(|s| s > ffi::CL_COMPLETE));
            *events = still;
            ended = done;
            match events.first() {
                Some(first) => first.clone(),
                None => {
                    let all = left.take();
                    drop(left);
                    drop(all);
                    drop(ended);
                    self.set_now();
                    return Ok(());
                }
            }
        };
        drop(ended);
        // SAFETY: `pending` is live (held here); the handle below takes a reference of
        // its own.
        let watched = unsafe { RawEvent::retain(pending.raw()) }.map_err(|e| e.to_string())?;
        let waker = std::task::Waker::from(self.clone());
        // Not counted as ending on its own (`on_its_own` false): it may wait behind a
        // gate of the program's. The poller reads it; a blocker waits on it only while
        // no gate of the context is open (the waiter's *blocked where it ends on its
        // own* rule), when it waits at most on other hand-over gates, which the poller
        // opens.
        let context = self.gate.event.inner.context.raw();
        wake_when_ended(watched, &waker, context, false, &self.gates)
    }
}

/// Has the waiter call `waker` once `watched`, a command or user event of `context`
/// with no queue of the library's, has ended: blocked on by a waiter thread where it
/// ends `on_its_own`, else read by the poller, which a gate of `gates` set through the
/// library kicks.
fn wake_when_ended(
    watched: RawEvent,
    waker: &std::task::Waker,
    context: cl_context,
    on_its_own: bool,
    gates: &Arc<OpenGates>,
) -> std::result::Result<(), String> {
    let watch = Arc::new(Watch::default());
    watch.ended_or_wake(waker);
    let order = Order {
        driver: context as usize,
        queue: None,
        in_order: false,
        ends_on_its_own: on_its_own,
        gates: Some(gates.clone()),
        held: None,
    };
    waiter()
        .watch(Arc::new(watched), order, watch)
        .map(drop)
        .map_err(|e| format!("the waiter's thread could not start: {e}"))
}

impl std::task::Wake for Joiner {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Err(e) = self.next() {
            // The gate must not open before the commands end; none of the library's
            // threads can watch them now, so it stays closed and the log says why.
            log::error!(target: "cl_lifetime::pool", "a pooled block's hand-over gate stays closed: {e}");
        }
    }
}

/// Sets `gate` as `source` ended, if it has.
fn follow_status(gate: &Gate, source: cl_event) {
    let status = match ffi::execution_status(source) {
        Ok(status) if status > ffi::CL_COMPLETE => return,
        Ok(status) => status,
        // An event whose status cannot be read counts as failed with that status.
        Err(status) => status,
    };
    if !gate.is_set() {
        // Refused only when the library set it meanwhile.
        let _ = gate.set_status(status);
    }
}

/// The waker of a followed event: sets its gate (the *raw handles* rule).
struct Follower {
    source: RawEvent,
    gate: Arc<Gate>,
}

impl std::task::Wake for Follower {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        follow_status(&self.gate, self.source.raw());
    }
}

/// `CL_COMMAND_USER`.
const CL_COMMAND_USER: u32 = 0x11F5;
