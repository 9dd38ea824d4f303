//! Lists that stay on the stack for the few items an enqueue has, so the enqueue path
//! allocates nothing in the common case.

// The handle type of the OpenCL binding (`ffi` re-exports it): plain data here, no call.
use opencl3::types::cl_event;

/// Items kept inline before a list moves to the heap.
pub(crate) const INLINE: usize = 4;

/// A list of up to [`INLINE`] items on the stack, more on the heap.
pub(crate) enum List<T> {
    Inline([Option<T>; INLINE], usize),
    Heap(Vec<T>),
}

impl<T> List<T> {
    pub(crate) fn new() -> Self {
        List::Inline([const { None }; INLINE], 0)
    }

    pub(crate) fn push(&mut self, item: T) {
        match self {
            List::Inline(items, len) if *len < INLINE => {
                items[*len] = Some(item);
                *len += 1;
            }
            List::Inline(items, _) => {
                let mut heap: Vec<T> = items.iter_mut().filter_map(Option::take).collect();
                heap.push(item);
                *self = List::Heap(heap);
            }
            List::Heap(heap) => heap.push(item),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            List::Inline(_, len) => *len,
            List::Heap(heap) => heap.len(),
        }
    }

    /// The items, in order, on the heap.
    pub(crate) fn into_boxed_slice(self) -> Box<[T]> {
        match self {
            List::Inline(items, len) => items.into_iter().take(len).flatten().collect(),
            List::Heap(heap) => heap.into_boxed_slice(),
        }
    }

    pub(crate) fn last_mut(&mut self) -> Option<&mut T> {
        match self {
            List::Inline(items, len) => items[..*len].last_mut().and_then(Option::as_mut),
            List::Heap(heap) => heap.last_mut(),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        let (inline, heap): (&[Option<T>], &[T]) = match self {
            List::Inline(items, len) => (&items[..*len], &[]),
            List::Heap(heap) => (&[], heap),
        };
        inline.iter().flatten().chain(heap)
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let (inline, heap): (&mut [Option<T>], &mut [T]) = match self {
            List::Inline(items, len) => (&mut items[..*len], &mut []),
            List::Heap(heap) => (&mut [], heap),
        };
        inline.iter_mut().flatten().chain(heap)
    }

    /// Sorts by `key`, stably.
    pub(crate) fn sort_by_key<K: Ord>(&mut self, key: impl Fn(&T) -> K) {
        match self {
            List::Inline(items, len) => items[..*len].sort_by_key(|item| item.as_ref().map(&key)),
            List::Heap(heap) => heap.sort_by_key(key),
        }
    }
}

/// A wait list: contiguous, as `clEnqueue*` takes it, on the stack up to [`INLINE`].
pub(crate) struct WaitList {
    inline: [cl_event; INLINE],
    len: usize,
    heap: Vec<cl_event>,
}

impl WaitList {
    pub(crate) fn new() -> Self {
        WaitList {
            inline: [std::ptr::null_mut(); INLINE],
            len: 0,
            heap: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, event: cl_event) {
        if self.len < INLINE {
            self.inline[self.len] = event;
            self.len += 1;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.inline);
            }
            self.heap.push(event);
        }
    }

    pub(crate) fn as_slice(&self) -> &[cl_event] {
        if self.heap.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }

    /// Sorts the events and drops repeats.
    pub(crate) fn sort_dedup(&mut self) {
        if self.heap.is_empty() {
            let events = &mut self.inline[..self.len];
            events.sort_unstable_by_key(|&e| e as usize);
            let mut kept = 0;
            for i in 0..events.len() {
                if kept == 0 || events[i] != events[kept - 1] {
                    events[kept] = events[i];
                    kept += 1;
                }
            }
            self.len = kept;
        } else {
            self.heap.sort_unstable_by_key(|&e| e as usize);
            self.heap.dedup();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_keeps_its_order_and_sorts_across_the_heap_boundary() {
        for n in [0, 1, INLINE, INLINE + 1, 3 * INLINE] {
            let mut list = List::new();
            for i in (0..n).rev() {
                list.push(i);
            }
            assert_eq!(list.len(), n);
            assert_eq!(
                list.iter().copied().collect::<Vec<_>>(),
                (0..n).rev().collect::<Vec<_>>()
            );
            list.sort_by_key(|&i| i);
            assert_eq!(
                list.iter().copied().collect::<Vec<_>>(),
                (0..n).collect::<Vec<_>>()
            );
            for item in list.iter_mut() {
                *item += 1;
            }
            assert_eq!(
                list.last_mut().copied(),
                n.checked_sub(1).map(|last| last + 1)
            );
        }
    }

    #[test]
    fn a_wait_list_is_contiguous_sorted_and_free_of_repeats_at_every_size() {
        for n in [0usize, 1, INLINE, INLINE + 1, 3 * INLINE] {
            let mut wait = WaitList::new();
            for i in 0..n {
                // Every event twice, newest first.
                let e = (8 * (n - i)) as cl_event;
                wait.push(e);
                wait.push(e);
            }
            assert_eq!(wait.as_slice().len(), 2 * n);
            wait.sort_dedup();
            let expected: Vec<cl_event> = (1..=n).map(|i| (8 * i) as cl_event).collect();
            assert_eq!(wait.as_slice(), &expected[..]);
        }
    }
}
