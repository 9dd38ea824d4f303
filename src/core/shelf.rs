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

/// What a shelf holds: a sub-buffer's owner ([`ffi::OwnedMem`]), or, in the unit tests, a
/// stand-in with no driver behind it.
pub(crate) trait Shelved {
    /// Its handle, as a number: what [`Shelves::made`] notes it by.
    fn key(&self) -> usize;
}

impl Shelved for ffi::OwnedMem {
    fn key(&self) -> usize {
        self.raw() as usize
    }
}

/// One root's sub-buffers: the order each was made in, and the idle ones by region.
struct Shelf<H> {
    /// Every sub-buffer made on the root and not released, by handle: when it was made
    /// (the *newest made first* order of the release).
    made: HashMap<usize, u64>,
    /// The idle ones by region (origin in the root, bytes), each with its one reference.
    idle: BTreeMap<(usize, usize), Vec<H>>,
    /// The next one's place in `made`.
    next: u64,
}

impl<H> Default for Shelf<H> {
    fn default() -> Self {
        Shelf {
            made: HashMap::new(),
            idle: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<H: Shelved> Shelf<H> {
    /// The idle ones, newest made first.
    fn release_order(self) -> Vec<H> {
        let made = self.made;
        let mut idle: Vec<(u64, H)> = self
            .idle
            .into_values()
            .flatten()
            .map(|h| (made.get(&h.key()).copied().unwrap_or(0), h))
            .collect();
        idle.sort_unstable_by_key(|&(made, _)| std::cmp::Reverse(made));
        idle.into_iter().map(|(_, h)| h).collect()
    }

    /// Releases the idle ones (their owners), newest made first; forgets the rest (in
    /// use: their holder releases them itself, finding no shelf). Every command on one
    /// had ended before it was shelved.
    fn release(self) {
        for h in self.release_order() {
            drop(h);
        }
    }
}

/// The shelves of a context's roots, by root handle. A root has one from its first
/// sub-buffer made by the library to its release.
pub(crate) struct Shelves<H = ffi::OwnedMem>(Mutex<HashMap<usize, Shelf<H>>, rank::Tracked>);

impl<H> Default for Shelves<H> {
    fn default() -> Self {
        Shelves(Mutex::default())
    }
}

impl<H: Shelved> Shelves<H> {
    /// Notes that `sub` was just made on `root`, which the library owns and releases (its
    /// shelf opens if it had none).
    pub(crate) fn made(&self, root: cl_mem, sub: &H) {
        let mut shelves = self.0.lock();
        let shelf = shelves.entry(root as usize).or_default();
        shelf.made.insert(sub.key(), shelf.next);
        shelf.next += 1;
    }

    /// An idle sub-buffer of `root` over exactly `region` (origin in the root, bytes), taken
    /// off the shelf.
    pub(crate) fn take(&self, root: cl_mem, region: (usize, usize)) -> Option<H> {
        let mut shelves = self.0.lock();
        let idle = &mut shelves.get_mut(&(root as usize))?.idle;
        let same = idle.get_mut(&region)?;
        let sub = same.pop();
        if same.is_empty() {
            idle.remove(&region);
        }
        sub
    }

    /// The idle sub-buffer of `root` over exactly `region`, or a new one from `make`, noted
    /// as made on `root`: how the library gets every sub-buffer of a root it owns.
    pub(crate) fn take_or_make(
        &self,
        root: cl_mem,
        region: (usize, usize),
        make: impl FnOnce() -> crate::error::Result<H>,
    ) -> crate::error::Result<H> {
        if let Some(sub) = self.take(root, region) {
            return Ok(sub);
        }
        let sub = make()?;
        self.made(root, &sub);
        Ok(sub)
    }

    /// Puts `sub`, a sub-buffer of `root` over `region` that nothing uses any more, on
    /// `root`'s shelf; gives it back when `root` has no shelf (it was released, or `sub`
    /// was not made through [`Shelves::made`]): the caller releases it then.
    pub(crate) fn put(&self, root: cl_mem, region: (usize, usize), sub: H) -> Result<(), H> {
        let mut shelves = self.0.lock();
        match shelves.get_mut(&(root as usize)) {
            Some(shelf) if shelf.made.contains_key(&sub.key()) => {
                shelf.idle.entry(region).or_default().push(sub);
                Ok(())
            }
            _ => Err(sub),
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

    /// A stand-in sub-buffer: its number.
    impl Shelved for usize {
        fn key(&self) -> usize {
            *self
        }
    }

    #[test]
    fn a_shelf_gives_a_region_back_only_to_that_region_and_only_what_was_made_on_its_root() {
        let shelves = Shelves::<usize>::default();
        let (root, other) = (handle(0x1000), handle(0x2000));
        let (a, b, stranger) = (0x10, 0x20, 0x30);
        // No shelf before the root's first sub-buffer: given back, for the caller to release.
        assert_eq!(shelves.put(root, (0, 64), a), Err(a));
        shelves.made(root, &a);
        shelves.made(root, &b);
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
        let shelf = shelves.0.lock().remove(&(root as usize)).unwrap();
        assert_eq!(shelf.release_order(), vec![b]);
    }

    #[test]
    fn a_shelf_releases_newest_made_first_whatever_order_they_were_let_go_of() {
        let shelves = Shelves::<usize>::default();
        let root = handle(0x1000);
        let made: Vec<usize> = (1..=5).map(|n| n * 0x10).collect();
        for raw in &made {
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
        let newest_first: Vec<usize> = made.iter().rev().copied().collect();
        assert_eq!(shelf.release_order(), newest_first);
    }
}
