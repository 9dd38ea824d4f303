//! Where `.cl` files are found, and which build options are refused: no OpenCL here.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The environment variable naming extra kernel folders.
pub const KERNELS_VAR: &str = "CL_LIFETIME_KERNELS";

/// The *kernel lookup* rule: where `name` is looked for, in order, as absolute paths: the working directory
/// `cwd`, the value of `CL_LIFETIME_KERNELS` and the executable's path are given.
pub(crate) fn search_paths(
    name: &str,
    cwd: &Path,
    kernels_var: Option<&std::ffi::OsStr>,
    exe: Option<&Path>,
) -> Vec<PathBuf> {
    let mut names = vec![PathBuf::from(name)];
    if Path::new(name).extension().is_none() {
        names.push(PathBuf::from(format!("{name}.cl")));
    }
    let mut dirs: Vec<PathBuf> = vec![cwd.to_path_buf()];
    if !Path::new(name).is_absolute() {
        if let Some(list) = kernels_var {
            dirs.extend(
                std::env::split_paths(list)
                    .filter(|d| !d.as_os_str().is_empty())
                    .map(|d| cwd.join(d)),
            );
        }
        dirs.push(cwd.join("kernels"));
        if let Some(dir) = exe.and_then(Path::parent) {
            dirs.push(dir.to_path_buf());
            dirs.push(dir.join("kernels"));
        }
    }
    let mut paths = Vec::new();
    for dir in &dirs {
        for n in &names {
            let path = dir.join(n);
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths
}

/// The *kernel lookup* rule: the first of [`search_paths`] that is a file.
pub(crate) fn find_file(name: &str) -> Result<PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let exe = std::env::current_exe().ok();
    let kernels_var = std::env::var_os(KERNELS_VAR);
    let searched = search_paths(name, &cwd, kernels_var.as_deref(), exe.as_deref());
    match searched.iter().find(|p| p.is_file()) {
        Some(found) => Ok(found.canonicalize().unwrap_or_else(|_| found.clone())),
        None => Err(Error::KernelFileNotFound {
            name: name.to_string(),
            searched,
            cwd,
        }),
    }
}

/// The *checked options* rule: options that must not reach the driver.
pub(crate) fn check_options(options: &str) -> Result<()> {
    let refuse = |reason: &str| Error::BuildOptions {
        options: options.to_string(),
        reason: reason.to_string(),
    };
    if options.contains('\0') {
        return Err(refuse("the options contain a NUL byte"));
    }
    let words: Vec<&str> = options.split_whitespace().collect();
    for (at, word) in words.iter().enumerate() {
        if matches!(*word, "-D" | "-I")
            && words.get(at + 1).is_none_or(|next| next.starts_with('-'))
        {
            return Err(refuse(&format!("`{word}` is not followed by its value")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_kernel_lookup_rule_tries_each_place_in_order() {
        let cwd = Path::new("/home/user/app");
        let list = std::env::join_paths(["extra", "/opt/k"]).unwrap();
        let paths = search_paths("add", cwd, Some(&list), Some(Path::new("/usr/bin/app")));
        let expected: Vec<PathBuf> = [
            "/home/user/app/add",
            "/home/user/app/add.cl",
            "/home/user/app/extra/add",
            "/home/user/app/extra/add.cl",
            "/opt/k/add",
            "/opt/k/add.cl",
            "/home/user/app/kernels/add",
            "/home/user/app/kernels/add.cl",
            "/usr/bin/add",
            "/usr/bin/add.cl",
            "/usr/bin/kernels/add",
            "/usr/bin/kernels/add.cl",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(paths, expected);
    }

    #[test]
    fn a_name_with_an_extension_or_an_absolute_path_is_looked_for_as_given() {
        let cwd = Path::new("/home/user/app");
        let paths = search_paths("add.cl", cwd, None, None);
        assert_eq!(
            paths,
            [
                PathBuf::from("/home/user/app/add.cl"),
                PathBuf::from("/home/user/app/kernels/add.cl")
            ]
        );
        let paths = search_paths("/k/add.cl", cwd, Some(OsStr::new("x")), None);
        assert_eq!(paths, [PathBuf::from("/k/add.cl")]);
    }

    #[test]
    fn a_bare_define_or_include_and_a_nul_are_refused() {
        for bad in [
            "-D",
            "-DX=1 -I",
            "-D -cl-fast-relaxed-math",
            "-I -DX",
            "a\0b",
        ] {
            assert!(
                matches!(check_options(bad), Err(Error::BuildOptions { .. })),
                "{bad:?}"
            );
        }
        for good in [
            "",
            "-D X=1",
            "-DX=1",
            "-I dir -cl-std=CL1.2",
            "-D N=4 -I inc",
        ] {
            assert!(check_options(good).is_ok(), "{good:?}");
        }
    }
}
