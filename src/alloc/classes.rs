//! Size classes: which pooled blocks a request may take. No OpenCL here.

/// The smallest size class.
pub(crate) const MIN_CLASS: usize = 256;

/// The size class of a `bytes` request on devices whose largest allocation is
/// `max_alloc` (the pool's *size classes* rule): the next power of two from
/// [`MIN_CLASS`], or, past the largest power of two the devices allow, the request rounded
/// up to [`MIN_CLASS`] (at most `max_alloc`), a class of its own.
pub(crate) fn class_of(bytes: usize, max_alloc: u64) -> usize {
    let class = bytes.max(MIN_CLASS).next_power_of_two();
    if class as u64 <= max_alloc {
        class
    } else {
        bytes
            .next_multiple_of(MIN_CLASS)
            .min(usize::try_from(max_alloc).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_requests_share_the_smallest_class() {
        assert_eq!(class_of(1, 1 << 30), MIN_CLASS);
        assert_eq!(class_of(MIN_CLASS, 1 << 30), MIN_CLASS);
        assert_eq!(class_of(MIN_CLASS + 1, 1 << 30), 2 * MIN_CLASS);
    }

    #[test]
    fn a_class_is_the_next_power_of_two_within_the_device_limit() {
        for bytes in [300, 1000, 4096, 4097, 1 << 20, (1 << 20) + 1] {
            let class = class_of(bytes, 1 << 30);
            assert!(class.is_power_of_two() && class >= bytes && class < 2 * bytes.max(MIN_CLASS));
        }
    }

    #[test]
    fn past_the_largest_power_of_two_a_request_is_its_own_class_within_the_limit() {
        let max: usize = 3 << 20; // 3 MiB: the largest power of two allowed is 2 MiB
        assert_eq!(class_of((2 << 20) + 1, max as u64), (2 << 20) + MIN_CLASS);
        assert_eq!(class_of(max, max as u64), max);
        assert_eq!(class_of(max - 10, max as u64), max);
    }
}
