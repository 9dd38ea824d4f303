//! [`Pod`]: the element types a buffer, a scalar argument or a transfer may hold.

/// Plain data that may live in a device buffer: `Copy`, no padding that matters, and
/// valid for every bit pattern the device may write.
///
/// # Safety
///
/// Implement it only for types that are valid for every bit pattern and contain no
/// pointers or references (`#[repr(C)]` structs of such fields, for example).
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive number is valid for every bit pattern and holds no pointer.
        unsafe impl Pod for $t {}
    )* };
}
pod!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

// SAFETY: an array of `Pod` elements has no padding between them and inherits their
// validity for every bit pattern.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}
