//! The *shelved, never released* rule: the sub-buffers the library makes on a memory
//! object it owns (an arena's carves, views' sub-buffers) are released only with that
//! object, their root. Until then one that its block or view lets go of waits on its
//! root's shelf, by region, for the next carve or view of exactly that region, which takes
//! it instead of making one. The root's release releases its shelf first, newest made
//! first.
//!
//! NVIDIA's driver (580) crashes, with raw calls alone (`examples/nvidia_carve_views.rs`),
//! when sub-buffers that overlap others are released and made again over the same bytes
//! of a root that stays: carves with views, and views alone. It never crashed when no
//! sub-buffer of the root was released before the root, made anew or taken again by
//! region, with all of them released newest made first at the end; nor when no bytes were
//! ever covered twice (design trap "overlapping sub-buffers on NVIDIA"). Valid OpenCL on
//! every driver, so kept on every driver: a root holds at most one sub-buffer per region
//! it had at once, a handle each, and taking one from the shelf saves a
//! `clCreateSubBuffer`.

use std::collections::{BTreeMap, HashMap};

use crate::ffi::{self, cl_mem};
use crate::util::sync::{Mutex, rank};

/// One root's sub-buffers: the order each was made in, and the idle ones by region.
#[derive(Default)]
struct Shelf {
    /// Every sub-buffer made on the root and not released, by handle: when it was made
    /// (the *newest made first* order of the release).
    made: HashMap<usize, u64>,
    /// The idle ones by region (origin in the root, bytes), each with its one reference
    /// (handles as numbers: the shelf only holds them, so it is `Send` as it is).
    idle: BTreeMap<(usize, usize), Vec<usize>>,
    /// The next one's place in `made`.
    next: u64,
}

impl Shelf {
    /// The idle ones, newest made first.
    fn release_order(&self) -> Vec<cl_mem> {
        let mut idle: Vec<(u64, cl_mem)> = self
            .idle
            .values()
            .flatten()
            .map(|&raw| (self.made.get(&raw).copied().unwrap_or(0), raw as cl_mem))
            .collect();
        idle.sort_unstable_by_key(|&(made, _)| std::cmp::Reverse(made));
        idle.into_iter().map(|(_, raw)| raw).collect()
    }

    /// Releases the idle ones, newest made first; forgets the rest (in use: their holder
    /// releases them itself, finding no shelf).
    fn release(self) {
        for raw in self.release_order() {
            // SAFETY: the one reference the shelf was given, released once, here; every
            // command on it had ended before it was shelved.
            if let Err(e) = unsafe { ffi::release_mem(raw) } {
                log::error!(target: "cl_lifetime::buffer", "releasing a shelved sub-buffer: {e}");
            }
        }
    }
}

/// The shelves of a context's roots, by root handle. A root has one from its first
/// sub-buffer made by the library to its release.
#[derive(Default)]
pub(crate) struct Shelves(Mutex<HashMap<usize, Shelf>, rank::Tracked>);

impl Shelves {
    /// Notes that `raw` was just made on `root`, which the library owns and releases (its
    /// shelf opens if it had none).
    pub(crate) fn made(&self, root: cl_mem, raw: cl_mem) {
        let mut shelves = self.0.lock();
        let shelf = shelves.entry(root as usize).or_default();
        shelf.made.insert(raw as usize, shelf.next);
        shelf.next += 1;
    }

    /// An idle sub-buffer of `root` over exactly `region` (origin in the root, bytes), taken
    /// off the shelf with its one reference.
    pub(crate) fn take(&self, root: cl_mem, region: (usize, usize)) -> Option<cl_mem> {
        let mut shelves = self.0.lock();
        let idle = &mut shelves.get_mut(&(root as usize))?.idle;
        let same = idle.get_mut(&region)?;
        let raw = same.pop();
        if same.is_empty() {
            idle.remove(&region);
        }
        raw.map(|raw| raw as cl_mem)
    }

    /// The idle sub-buffer of `root` over exactly `region`, or a new one from `make`, noted
    /// as made on `root`: how the library gets every sub-buffer of a root it owns.
    pub(crate) fn take_or_make(
        &self,
        root: cl_mem,
        region: (usize, usize),
        make: impl FnOnce() -> crate::error::Result<cl_mem>,
    ) -> crate::error::Result<cl_mem> {
        if let Some(raw) = self.take(root, region) {
            return Ok(raw);
        }
        let raw = make()?;
        self.made(root, raw);
        Ok(raw)
    }

    /// Puts `raw`, a sub-buffer of `root` over `region` that nothing uses any more, on
    /// `root`'s shelf with its one reference; gives it back when `root` has no shelf (it
    /// was released, or `raw` was not made through [`Shelves::made`]): the caller
    /// releases it then.
    pub(crate) fn put(
        &self,
        root: cl_mem,
        region: (usize, usize),
        raw: cl_mem,
    ) -> std::result::Result<(), cl_mem> {
        let mut shelves = self.0.lock();
        match shelves.get_mut(&(root as usize)) {
            Some(shelf) if shelf.made.contains_key(&(raw as usize)) => {
                shelf.idle.entry(region).or_default().push(raw as usize);
                Ok(())
            }
            _ => Err(raw),
        }
    }

    /// Releases `root`'s shelf, newest made first, before `root`'s own release, and forgets
    /// `root` (the driver may hand its handle out again).
    pub(crate) fn release_of(&self, root: cl_mem) {
        let shelf = self.0.lock().remove(&(root as usize));
        if let Some(shelf) = shelf {
            shelf.release();
        }
    }

    /// How many idle sub-buffers `root`'s shelf holds.
    pub(crate) fn idle_of(&self, root: cl_mem) -> usize {
        self.0
            .lock()
            .get(&(root as usize))
            .map_or(0, |s| s.idle.values().map(Vec::len).sum())
    }

    /// Releases every shelf (the context's drop: roots other code released).
    pub(crate) fn release_all(&mut self) {
        for (_, shelf) in std::mem::take(self.0.get_mut()) {
            shelf.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: usize) -> cl_mem {
        n as cl_mem
    }

    #[test]
    fn a_shelf_gives_a_region_back_only_to_that_region_and_only_what_was_made_on_its_root() {
        let shelves = Shelves::default();
        let (root, other) = (handle(0x1000), handle(0x2000));
        let (a, b, stranger) = (handle(0x10), handle(0x20), handle(0x30));
        // No shelf before the root's first sub-buffer: given back, for the caller to release.
        assert_eq!(shelves.put(root, (0, 64), a), Err(a));
        shelves.made(root, a);
        shelves.made(root, b);
        assert_eq!(shelves.put(root, (0, 64), a), Ok(()));
        assert_eq!(shelves.put(root, (64, 64), b), Ok(()));
        // Made elsewhere, or on another root: not this shelf's.
        assert_eq!(shelves.put(root, (0, 64), stranger), Err(stranger));
        assert_eq!(shelves.put(other, (0, 64), a), Err(a));
        assert_eq!(shelves.idle_of(root), 2);
        assert_eq!(shelves.take(root, (0, 128)), None);
        assert_eq!(shelves.take(other, (0, 64)), None);
        assert_eq!(shelves.take(root, (0, 64)), Some(a));
        assert_eq!(shelves.take(root, (0, 64)), None);
        assert_eq!(shelves.idle_of(root), 1);
        // Forgotten without a release: the handles are not real.
        let shelf = shelves.0.lock().remove(&(root as usize)).unwrap();
        assert_eq!(shelf.release_order(), vec![b]);
    }

    #[test]
    fn a_shelf_releases_newest_made_first_whatever_order_they_were_let_go_of() {
        let shelves = Shelves::default();
        let root = handle(0x1000);
        let made: Vec<cl_mem> = (1..=5).map(|n| handle(n * 0x10)).collect();
        for &raw in &made {
            shelves.made(root, raw);
        }
        // Let go of in an order unlike the one they were made in, two of one region.
        for (i, &k) in [2usize, 0, 4, 1, 3].iter().enumerate() {
            shelves.put(root, (64 * (i % 3), 64), made[k]).unwrap();
        }
        // One taken again and let go of again keeps its place: when it was made.
        let again = shelves.take(root, (0, 64)).unwrap();
        shelves.put(root, (0, 64), again).unwrap();
        let shelf = shelves.0.lock().remove(&(root as usize)).unwrap();
        let newest_first: Vec<cl_mem> = made.iter().rev().copied().collect();
        assert_eq!(shelf.release_order(), newest_first);
    }
}
