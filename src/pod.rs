//! [`Pod`]: the element types a buffer, a scalar argument or a transfer may hold.

/// Plain data that may live in a device buffer: `Copy`, no padding that matters, and
/// valid for every bit pattern the device may write.
///
/// # Safety
///
/// Implement it only for types that are valid for every bit pattern and contain no
/// pointers or references (`#[repr(C)]` structs of such fields, for example).
pub unsafe trait Pod: Copy + Send + Sync + 'static {
    /// The OpenCL built-in type this is, where it is one (`f32` is `float`, `[f32; 4]` is
    /// `float4`), for the launch checks to compare with what a kernel declares; `None`
    /// (the default, for user types) leaves the comparison to the caller.
    #[doc(hidden)]
    const ELEMENT: Option<Element> = None;
}

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

macro_rules! pod {
    ($($t:ty => $float:expr),*) => { $(
        // SAFETY: a primitive number is valid for every bit pattern and holds no pointer.
        unsafe impl Pod for $t {
            const ELEMENT: Option<Element> = Element::scalar($float, size_of::<$t>() as u8);
        }
    )* };
}
pod!(u8 => false, i8 => false, u16 => false, i16 => false, u32 => false, i32 => false,
     u64 => false, i64 => false, f32 => true, f64 => true);

// SAFETY: an array of `Pod` elements has no padding between them and inherits their
// validity for every bit pattern.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {
    const ELEMENT: Option<Element> = Element::vector(T::ELEMENT, N);
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
            element: T::ELEMENT,
            rust: std::any::type_name::<T>(),
        }
    }
}
