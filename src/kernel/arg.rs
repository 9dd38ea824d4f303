//! Launch arguments.

use std::fmt;
use std::ptr;

use crate::checks::Given;
use crate::pod::{Pod, Ty};
use crate::record::block::Block;
use crate::record::submit::Touch;
use crate::tracker::{Access, Span, Use};

/// Largest scalar argument, in bytes (a `double16` is 128).
pub(crate) const MAX_SCALAR: usize = 128;

/// A buffer argument: a block, or a view's region of it.
#[derive(Clone, Copy)]
pub(crate) struct BufferArg<'a> {
    pub(crate) block: &'a Block,
    /// How the kernel uses it: its access, and its bytes, for the tracker (the same
    /// [`Use`] reaches the buffer's record).
    pub(crate) how: Use,
    /// Passed as read and written ([`Arg::read_write`] and its range form), which the
    /// library records as written: for error messages only.
    pub(crate) read_write: bool,
    pub(crate) ty: Ty,
    /// A view's bytes: origin and length in the block; `None` for the whole block.
    pub(crate) region: Option<(usize, usize)>,
}

impl BufferArg<'_> {
    /// The name of the constructor that made it, less its range suffix.
    fn name(&self) -> &'static str {
        match (self.how.access, self.read_write) {
            (Access::Read, _) => "read",
            (Access::Write, false) => "write",
            (Access::Write, true) => "read_write",
        }
    }
}

pub(crate) enum ArgKind<'a> {
    Buffer(BufferArg<'a>),
    Scalar {
        bytes: [u8; MAX_SCALAR],
        len: usize,
        ty: Ty,
    },
    Local(usize),
}

/// One kernel argument, naming how the kernel uses it.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Arg, Error};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let source = "__kernel void axpy(__global const float *x, __global float *y, float a) {
///     size_t i = get_global_id(0); y[i] += a * x[i]; }";
/// let axpy = ctx.program_from_source("axpy", source, "")?.kernel("axpy")?;
/// let x = ctx.buffer_from(&[1.0f32; 4])?;
/// let y = ctx.buffer_from(&[1.0f32, 2.0, 3.0, 4.0])?;
/// let args = [Arg::read(&x), Arg::read_write(&y), Arg::scalar(10.0f32)];
/// // SAFETY: axpy touches element i < 4 of x and y, both 4 long, and writes only y.
/// unsafe { queue.launch(&axpy, &[4], &args)? };
/// assert_eq!(queue.read_owned(&y)?.wait()?, [11.0, 12.0, 13.0, 14.0]);
/// // An argument that does not match the kernel is refused before the driver sees it.
/// let wrong = [Arg::read(&x), Arg::read_write(&y), Arg::scalar(10u64)]; // `a` is a float
/// // SAFETY: as above (the launch is refused before the driver sees it).
/// let refused = unsafe { queue.launch(&axpy, &[4], &wrong) };
/// assert!(matches!(refused, Err(Error::KernelArg { index: 2, .. })));
/// # Ok(())
/// # }
/// ```
pub struct Arg<'a>(pub(crate) ArgKind<'a>);

impl fmt::Debug for Arg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            ArgKind::Buffer(b) => match b.region {
                None if b.how.span == Span::ALL => write!(
                    f,
                    "Arg::{}(buffer {} of {})",
                    b.name(),
                    b.block.id,
                    b.ty.rust
                ),
                None => write!(
                    f,
                    "Arg::{}(buffer {} of {}, touching bytes {}..{})",
                    b.name(),
                    b.block.id,
                    b.ty.rust,
                    b.how.span.start,
                    b.how.span.end
                ),
                Some((origin, bytes)) => write!(
                    f,
                    "Arg::{}(bytes {origin}..{} of buffer {} of {})",
                    b.name(),
                    origin + bytes,
                    b.block.id,
                    b.ty.rust
                ),
            },
            ArgKind::Scalar { len, ty, .. } => write!(f, "Arg::scalar({}, {len} bytes)", ty.rust),
            ArgKind::Local(size) => write!(f, "Arg::local({size} bytes)"),
        }
    }
}

impl<'a> Arg<'a> {
    /// A value passed by copy, such as a `u32` length or a `[f32; 4]`.
    pub fn scalar<T: Pod>(value: T) -> Arg<'a> {
        const {
            assert!(
                size_of::<T>() <= MAX_SCALAR,
                "scalar arguments are at most 128 bytes"
            )
        };
        let mut bytes = [0u8; MAX_SCALAR];
        // SAFETY: `T: Pod` is plain data of `size_of::<T>()` bytes, which fit in `bytes`
        // (checked above); the regions do not overlap.
        unsafe {
            ptr::copy_nonoverlapping(
                ptr::from_ref(&value).cast::<u8>(),
                bytes.as_mut_ptr(),
                size_of::<T>(),
            );
        }
        Arg(ArgKind::Scalar {
            bytes,
            len: size_of::<T>(),
            ty: Ty::of::<T>(),
        })
    }

    /// Local memory for `len` elements of `T` per work group.
    pub fn local<T: Pod>(len: usize) -> Arg<'a> {
        Arg(ArgKind::Local(len.saturating_mul(size_of::<T>())))
    }

    /// What the launch checks see ([`crate::checks`]).
    pub(crate) fn given(&self) -> Given {
        match self.0 {
            ArgKind::Buffer(BufferArg {
                how,
                read_write,
                ty,
                ..
            }) => Given::Buffer {
                access: how.access,
                read_write,
                ty,
            },
            ArgKind::Scalar { len, ty, .. } => Given::Scalar { bytes: len, ty },
            ArgKind::Local(size) => Given::Local(size),
        }
    }

    /// The bytes `region` (`None`: all) of a block, which the kernel uses with `access`
    /// (`span`: the same bytes, for the tracker).
    pub(crate) fn block(
        block: &'a Block,
        access: Access,
        ty: Ty,
        region: Option<(usize, usize)>,
        span: Span,
    ) -> Arg<'a> {
        Arg(ArgKind::Buffer(BufferArg {
            block,
            how: Use::new(access).within(span),
            read_write: false,
            ty,
            region,
        }))
    }

    /// The same argument, passed as read and written ([`Arg::read_write`]).
    pub(crate) fn read_and_written(mut self) -> Arg<'a> {
        if let ArgKind::Buffer(b) = &mut self.0 {
            b.read_write = true;
        }
        self
    }

    pub(crate) fn touch(&self) -> Option<Touch<'a>> {
        match self.0 {
            ArgKind::Buffer(b) => Some(Touch::kernel_arg(b.block, b.how)),
            _ => None,
        }
    }

    /// The buffer argument, if it is one.
    pub(crate) fn buffer(&self) -> Option<&BufferArg<'a>> {
        match &self.0 {
            ArgKind::Buffer(b) => Some(b),
            _ => None,
        }
    }
}
