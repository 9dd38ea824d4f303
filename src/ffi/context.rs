use std::ptr;

use opencl3::context::context as cl;

use std::time::Duration;

use super::codes::CL_INVALID_VALUE;
use super::{DeviceId, cl_context, cl_device_id, cl_int};
use crate::error::{Error, Result};

/// How many times `clCreateContext` is called before its `CL_INVALID_VALUE` is believed
/// (design trap "NVIDIA's clCreateContext fails now and then").
pub(crate) const CREATE_TRIES: u32 = 4;

/// `clCreateContext` over `devices` (all of one platform, at least one): no properties and
/// no callback, so no argument of it can be an invalid value. A `CL_INVALID_VALUE` is
/// answered by calling again, up to [`CREATE_TRIES`] times in all, a millisecond later and
/// then four times longer each time (design trap "NVIDIA's clCreateContext fails now and
/// then"); a driver that means it answers the same each time.
pub(crate) fn create_context(devices: &[DeviceId]) -> Result<cl_context> {
    let devices: Vec<cl_device_id> = devices.iter().map(|d| d.raw()).collect();
    tried_again_on_invalid_value(
        || cl::create_context(&devices, ptr::null(), None, ptr::null_mut()),
        std::thread::sleep,
    )
    .map_err(|s| Error::cl("clCreateContext", s))
}

/// Calls `create` until it answers other than `CL_INVALID_VALUE`, at most [`CREATE_TRIES`]
/// times, pausing with `pause` in between.
fn tried_again_on_invalid_value<T>(
    mut create: impl FnMut() -> std::result::Result<T, cl_int>,
    mut pause: impl FnMut(Duration),
) -> std::result::Result<T, cl_int> {
    let mut wait = Duration::from_millis(1);
    let mut tries = 1;
    loop {
        match create() {
            Err(CL_INVALID_VALUE) if tries < CREATE_TRIES => {
                log::info!(
                    target: "cl_lifetime::context",
                    "clCreateContext answered CL_INVALID_VALUE to a call with no properties and no callback (try {tries} of {CREATE_TRIES}); calling again in {wait:?}"
                );
                pause(wait);
                wait *= 4;
                tries += 1;
            }
            answer => return answer,
        }
    }
}

/// `clReleaseContext`.
///
/// # Safety
///
/// The caller owns one reference to `raw` and gives it up here.
pub(crate) unsafe fn release_context(raw: cl_context) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::release_context(raw) }.map_err(|s| Error::cl("clReleaseContext", s))
}

/// `clRetainContext`: one more reference to `raw`, owned by the caller.
///
/// # Safety
///
/// `raw` is a valid context.
pub(crate) unsafe fn retain_context(raw: cl_context) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::retain_context(raw) }.map_err(|s| Error::cl("clRetainContext", s))
}

/// `CL_CONTEXT_DEVICES`.
pub(crate) fn context_devices(raw: cl_context) -> Result<Vec<DeviceId>> {
    let devices = cl::get_context_info(raw, cl::CL_CONTEXT_DEVICES)
        .map_err(|s| Error::cl("clGetContextInfo", s))?
        .to_vec_intptr();
    Ok(devices
        .into_iter()
        .map(|d| DeviceId::new(d as cl_device_id))
        .collect())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{CL_INVALID_VALUE, CREATE_TRIES, tried_again_on_invalid_value};
    use crate::ffi::codes::CL_OUT_OF_HOST_MEMORY;

    /// Answers each call with the next of `answers`, counting the calls and the pauses.
    fn run(answers: &[Result<u8, i32>]) -> (Result<u8, i32>, usize, Vec<Duration>) {
        let mut calls = 0;
        let mut pauses = Vec::new();
        let answer = tried_again_on_invalid_value(
            || {
                calls += 1;
                answers[calls - 1]
            },
            |d| pauses.push(d),
        );
        (answer, calls, pauses)
    }

    #[test]
    fn a_context_refused_as_an_invalid_value_now_and_then_is_created_by_a_later_try() {
        let (answer, calls, pauses) = run(&[Err(CL_INVALID_VALUE), Err(CL_INVALID_VALUE), Ok(7)]);
        assert_eq!(answer, Ok(7));
        assert_eq!(calls, 3);
        assert_eq!(pauses, [Duration::from_millis(1), Duration::from_millis(4)]);
    }

    #[test]
    fn a_context_refused_as_an_invalid_value_every_time_is_that_error_after_the_last_try() {
        let answers = vec![Err(CL_INVALID_VALUE); CREATE_TRIES as usize];
        let (answer, calls, pauses) = run(&answers);
        assert_eq!(answer, Err(CL_INVALID_VALUE));
        assert_eq!(calls, CREATE_TRIES as usize);
        assert_eq!(pauses.len(), CREATE_TRIES as usize - 1);
    }

    #[test]
    fn a_context_refused_for_another_reason_is_not_tried_again() {
        let (answer, calls, pauses) = run(&[Err(CL_OUT_OF_HOST_MEMORY), Ok(1)]);
        assert_eq!(answer, Err(CL_OUT_OF_HOST_MEMORY));
        assert_eq!(calls, 1);
        assert!(pauses.is_empty());
    }
}
