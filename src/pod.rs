//! [`Pod`]: the element types a buffer, a scalar argument or a transfer may hold.
//!
//! With the `bytemuck` feature every `bytemuck::Pod` type is a `Pod` (the
//! primitives and arrays below among them); with `half`, so is `half::f16`, checked
//! against kernel parameters declared `half`.

/// Plain data that may live in a device buffer: `Copy`, no padding that matters, and
/// valid for every bit pattern the device may write.
///
/// The numbers (`u8` to `u64`, `i8` to `i64`, `f32`, `f64`) and arrays of `Pod` are
/// `Pod`; a launch checks them against the OpenCL type a kernel declares (`f32` is
/// `float`, `[f32; 4]` is `float4`). With the crate's `bytemuck` feature, every
/// `bytemuck::Pod` type is one (a `#[derive(bytemuck::Pod)]` struct needs no `unsafe` of
/// its own); with `half`, `half::f16` is one, checked against `half`.
///
/// # Safety
///
/// Implement it only for types that are valid for every bit pattern and contain no
/// pointers or references (`#[repr(C)]` structs of such fields, for example).
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

#[cfg(not(feature = "bytemuck"))]
macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive number is valid for every bit pattern and holds no pointer.
        unsafe impl Pod for $t {}
    )* };
}
#[cfg(not(feature = "bytemuck"))]
pod!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

// SAFETY: an array of `Pod` elements has no padding between them and inherits their
// validity for every bit pattern.
#[cfg(not(feature = "bytemuck"))]
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

// SAFETY: `half::f16` is a `repr(transparent)` `u16`: valid for every bit pattern, no
// pointer. (With `bytemuck` too, it is covered below: the feature turns on half's
// `bytemuck`.)
#[cfg(all(feature = "half", not(feature = "bytemuck")))]
unsafe impl Pod for half::f16 {}

// SAFETY: `bytemuck::Pod` promises what `Pod` asks: every bit pattern valid, no padding,
// no pointers or references (bytemuck's own safety contract); `Send + Sync` are required
// here besides.
#[cfg(feature = "bytemuck")]
unsafe impl<T: bytemuck::Pod + Send + Sync> Pod for T {}

/// An OpenCL built-in scalar or vector type, as the launch checks compare them: its kind,
/// the bytes of one lane, and its lanes.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Element {
    pub(crate) float: bool,
    pub(crate) bytes: u8,
    pub(crate) lanes: u8,
}

impl Element {
    const fn scalar(float: bool, bytes: u8) -> Option<Element> {
        Some(Element {
            float,
            bytes,
            lanes: 1,
        })
    }

    /// The vector of `n` lanes of `lane`, where OpenCL has one of that size (2, 4, 8 or 16
    /// lanes; a 3-vector takes the room of four, so `[T; 3]` is none).
    const fn vector(lane: Option<Element>, n: usize) -> Option<Element> {
        match lane {
            Some(Element {
                float,
                bytes,
                lanes: 1,
            }) if matches!(n, 2 | 4 | 8 | 16) => Some(Element {
                float,
                bytes,
                lanes: n as u8,
            }),
            _ => None,
        }
    }

    /// Whether a value of `self` fits a parameter declared as `declared`: the same kind
    /// (integer or floating point), lane size and lanes. Integers of one width fit
    /// whatever their signedness (a `u32` for an `int`): their bits are the same.
    pub(crate) fn fits(self, declared: Element) -> bool {
        self == declared
    }
}

/// The built-in type `T` is, where it is one: a number, `half::f16` with the `half`
/// feature, or an array of 2, 4, 8 or 16 of one (a vector). Compared by type, so each
/// monomorphized call folds to its answer.
fn element_of<T: 'static>() -> Option<Element> {
    use std::any::TypeId;
    fn is<T: 'static, U: 'static>() -> bool {
        TypeId::of::<T>() == TypeId::of::<U>()
    }
    macro_rules! table {
        ($($t:ty => $float:expr),*) => { $(
            let lane = Element::scalar($float, size_of::<$t>() as u8);
            if is::<T, $t>() {
                return lane;
            }
            if is::<T, [$t; 2]>() {
                return Element::vector(lane, 2);
            }
            if is::<T, [$t; 4]>() {
                return Element::vector(lane, 4);
            }
            if is::<T, [$t; 8]>() {
                return Element::vector(lane, 8);
            }
            if is::<T, [$t; 16]>() {
                return Element::vector(lane, 16);
            }
        )* };
    }
    table!(u8 => false, i8 => false, u16 => false, i16 => false, u32 => false, i32 => false,
           u64 => false, i64 => false, f32 => true, f64 => true);
    #[cfg(feature = "half")]
    table!(half::f16 => true);
    None
}

/// The element type of a buffer or a scalar, for the launch checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ty {
    pub(crate) element: Option<Element>,
    pub(crate) rust: &'static str,
}

impl Ty {
    pub(crate) fn of<T: Pod>() -> Ty {
        Ty {
            element: element_of::<T>(),
            rust: std::any::type_name::<T>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Element, element_of};

    fn el(float: bool, bytes: u8, lanes: u8) -> Option<Element> {
        Some(Element {
            float,
            bytes,
            lanes,
        })
    }

    #[test]
    fn numbers_and_their_vectors_are_the_opencl_built_in_types() {
        assert_eq!(element_of::<f32>(), el(true, 4, 1));
        assert_eq!(element_of::<u32>(), el(false, 4, 1));
        assert_eq!(element_of::<[f32; 4]>(), el(true, 4, 4));
        assert_eq!(element_of::<[i8; 16]>(), el(false, 1, 16));
        assert_eq!(element_of::<[f64; 2]>(), el(true, 8, 2));
    }

    #[cfg(feature = "half")]
    #[test]
    fn half_is_the_opencl_half() {
        assert_eq!(element_of::<half::f16>(), el(true, 2, 1));
        assert_eq!(element_of::<[half::f16; 8]>(), el(true, 2, 8));
    }

    #[test]
    fn other_shapes_and_user_types_are_no_built_in_type() {
        #[derive(Clone, Copy)]
        struct Mine(#[allow(dead_code)] u32);
        assert_eq!(
            element_of::<[f32; 3]>(),
            None,
            "a 3-vector takes four lanes' room"
        );
        assert_eq!(element_of::<[u32; 32]>(), None);
        assert_eq!(element_of::<Mine>(), None);
    }
}
