//! Device selection (the *named device*, *default device* and *typed misses* rules), "no ICD" as a typed error, and the careful path of a driver never seen.

use cl_lifetime::{Context, DEVICE_VAR, Device, Error};

use crate::common;

/// PoCL's `CL_PLATFORM_NAME`.
const POCL_PLATFORM: &str = "Portable Computing Language";

#[test]
fn device_list_is_not_empty_where_a_device_exists() {
    let _ctx = device!();
    let all = Device::all().unwrap();
    assert!(!all.is_empty());
    for device in &all {
        let (p, d) = device.indices();
        assert!(
            device.to_string().starts_with(&format!("{p}:{d} ")),
            "{device}"
        );
    }
}

#[test]
fn index_spec_picks_that_platform_and_device() {
    let _ctx = device!();
    let device = Device::select(Some("0:0")).unwrap();
    assert_eq!(device.indices(), (0, 0));
    // Blanks around the indices are ignored.
    let spaced = Device::select(Some(" 0 : 0 ")).unwrap();
    assert_eq!(spaced.indices(), (0, 0));
    assert_eq!(spaced.as_raw(), device.as_raw());
}

#[test]
fn pocl_spec_picks_the_pocl_device_in_any_case() {
    let _ctx = device!();
    let all = Device::all().unwrap();
    let Some(pocl) = all.iter().find(|d| d.platform_name() == POCL_PLATFORM) else {
        common::not_run("no PoCL device here");
        return;
    };
    // The README, the guide's "choosing a device" and the *named device* rule name `pocl` as
    // a spec that works.
    for spec in ["POCL", "pocl", "PoCL"] {
        match Device::select(Some(spec)) {
            Ok(found) => assert_eq!(
                found.platform_name(),
                POCL_PLATFORM,
                "{spec} picked {found}"
            ),
            Err(e) => panic!("{DEVICE_VAR}={spec} should find {pocl}: {e}"),
        }
    }
}

#[test]
fn name_spec_is_a_case_insensitive_part_of_the_platform_name() {
    let _ctx = device!();
    let first = Device::all().unwrap().remove(0);
    let name = first.platform_name().to_string();
    // The middle of the name, in the opposite case.
    let chars: Vec<char> = name.chars().collect();
    let part: String = chars[chars.len() / 4..chars.len() * 3 / 4]
        .iter()
        .map(|c| {
            if c.is_uppercase() {
                c.to_lowercase().next().unwrap_or(*c)
            } else {
                c.to_uppercase().next().unwrap_or(*c)
            }
        })
        .collect();
    assert!(!part.trim().is_empty(), "platform name too short: {name:?}");
    let found = Device::select(Some(&part)).unwrap();
    assert_eq!(found.indices(), first.indices(), "{part:?} picked {found}");
}

#[test]
fn name_spec_is_a_case_insensitive_part_of_the_device_name() {
    let _ctx = device!();
    let first = Device::all().unwrap().remove(0);
    let spec = first.name().to_uppercase();
    let found = Device::select(Some(&spec)).unwrap();
    assert_eq!(found.indices(), first.indices(), "{spec:?} picked {found}");
    let spec = first.name().to_lowercase();
    let found = Device::select(Some(&spec)).unwrap();
    assert_eq!(found.indices(), first.indices(), "{spec:?} picked {found}");
}

#[test]
fn unmatched_name_spec_is_no_device_listing_what_was_found_and_to_change_or_unset_the_variable() {
    let _ctx = device!();
    let all = Device::all().unwrap();
    let err = Device::select(Some("no-such-device-xyz")).unwrap_err();
    let Error::NoDevice {
        looked_for,
        found,
        hint,
    } = &err
    else {
        panic!("expected NoDevice, got {err:?}");
    };
    assert!(looked_for.contains("no-such-device-xyz"), "{looked_for}");
    assert!(looked_for.contains(DEVICE_VAR), "{looked_for}");
    let listed: Vec<String> = all.iter().map(ToString::to_string).collect();
    assert_eq!(found, &listed);
    assert!(found.iter().any(|f| f.contains(all[0].name())), "{found:?}");
    // The fix is the variable's, not an installation: PoCL or a driver was found.
    assert!(
        hint.contains(DEVICE_VAR) && hint.contains("unset"),
        "{hint}"
    );
    assert!(
        !hint.contains("install") && !hint.contains("make "),
        "{hint}"
    );

    let text = err.to_string();
    assert!(text.contains("no-such-device-xyz"), "{text}");
    assert!(text.contains("found:"), "{text}");
    assert!(text.contains(hint), "{text}");
    for device in &listed {
        assert!(text.contains(device.as_str()), "{text}");
    }
}

#[test]
fn index_spec_of_a_missing_device_is_no_device() {
    let _ctx = device!();
    let all = Device::all().unwrap();
    assert!(
        all.iter().all(|d| d.indices() != (7, 9)),
        "this machine has a device 7:9"
    );
    let err = Device::select(Some("7:9")).unwrap_err();
    assert!(
        matches!(&err, Error::NoDevice { looked_for, found, .. }
            if looked_for.contains("7:9") && found.len() == all.len()),
        "{err:?}"
    );
}

#[test]
fn no_spec_picks_the_first_gpu_else_the_first_device() {
    let _ctx = device!();
    let all = Device::all().unwrap();
    let expected = all.iter().find(|d| d.is_gpu()).unwrap_or(&all[0]);
    let chosen = Device::select(None).unwrap();
    assert_eq!(chosen.indices(), expected.indices());
    assert_eq!(chosen.as_raw(), expected.as_raw());
}

/// With no ICD registered at all (`OCL_ICD_VENDORS` an empty folder, so no platform),
/// asking for a context is a typed error, not a panic or a stall: the body runs in a child
/// process whose environment says so, with a time limit.
#[test]
fn missing_icd_is_a_typed_error_without_panic_or_stall_that_says_to_install_an_icd() {
    common::isolated(
        &test_path!(
            missing_icd_is_a_typed_error_without_panic_or_stall_that_says_to_install_an_icd
        ),
        common::CHILD_LIMIT,
        &[],
        || {
            let no_vendors = common::TempDir::new("no-icd");
            assert_eq!(
                std::fs::read_dir(no_vendors.path()).unwrap().count(),
                0,
                "{:?} is not empty",
                no_vendors.path()
            );
            // SAFETY: the child process runs this test alone, and nothing has opened
            // OpenCL or started a thread that reads the environment yet.
            unsafe {
                std::env::set_var("OCL_ICD_VENDORS", no_vendors.path());
                std::env::remove_var("OCL_ICD_FILENAMES");
                std::env::remove_var(DEVICE_VAR);
            }
            let err = Context::from_env().expect_err("a context without any ICD");
            println!("probe debug: {err:?}");
            println!("probe display: {err}");
            assert!(
                matches!(&err, Error::NoDevice { found, .. } if found.is_empty()),
                "{err:?}"
            );
            assert!(Device::all().unwrap().is_empty());
            let debug = format!("{err:?}");
            assert!(debug.starts_with("NoDevice"), "{debug}");
            assert!(debug.contains("found: []"), "{debug}");
            assert!(debug.contains("looked_for: \"any device\""), "{debug}");
            let display = err.to_string();
            assert!(display.contains("no OpenCL device found"), "{display}");
            assert!(!display.contains("matches any device"), "{display}");
            // The fix is an installation, with the user's own package manager.
            assert!(display.contains("lists no platform"), "{display}");
            assert!(display.contains("pocl-opencl-icd"), "{display}");
            assert!(!display.contains("make "), "{display}");
        },
    );
}

/// With every driver treated as unknown, a command behind a closed user event, enqueued
/// on a queue that already holds such a command unflushed, is enqueued without blocking:
/// the careful path flushes a queue before a command that waits on other work, and on a
/// driver whose flush runs the queue's commands itself (Oclgrind) that flush would wait
/// for the gate for ever. The body runs in a child process with a time limit.
#[test]
fn a_gated_command_on_a_queue_holding_gated_work_never_blocks_its_enqueue_when_drivers_are_unknown()
{
    common::isolated(
        &test_path!(
            a_gated_command_on_a_queue_holding_gated_work_never_blocks_its_enqueue_when_drivers_are_unknown
        ),
        common::CHILD_LIMIT,
        &[("CL_LIFETIME_DRIVER", "unknown")],
        || {
            let ctx = device!();
            assert!(!ctx.driver().measured(), "{:?}", ctx.driver());
            let queue = ctx.queue().unwrap();
            let a = ctx.buffer_from(&[7u32; 64]).unwrap();
            let b = ctx.buffer::<u32>(64).unwrap();
            let gate = ctx.user_event().unwrap();
            let read = queue.after(&[gate.event()]).read_owned(&a).unwrap();
            // Waits on the gate, with gated work of its queue not flushed yet.
            let copy = queue.after(&[gate.event()]).copy(&a, &b).unwrap();
            gate.complete().unwrap();
            assert_eq!(read.wait().unwrap(), vec![7u32; 64]);
            copy.wait().unwrap();
            assert_eq!(queue.read_owned(&b).unwrap().wait().unwrap(), vec![7u32; 64]);
        },
    );
}
