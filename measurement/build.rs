//! Compiles the counters shim (`shim/counters.cpp`) and the generic ATen call
//! (`shim/aten_call.cpp`) against libtorch's headers and gives the binary an rpath to the real
//! libtorch library directory, so it starts without LD_LIBRARY_PATH.
//! With the `cuda` feature the shim also reads the CUDA caching allocator, and the binary links
//! libtorch_cuda (and libc10_cuda) past rustc's `--as-needed`.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=shim/counters.cpp");
    println!("cargo:rerun-if-changed=shim/aten_call.cpp");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LIBTORCH");

    // torch-sys (links = "tch") exports its library directory to direct dependants.
    let lib_dir = env::var("DEP_TCH_LIBTORCH_LIB")
        .map(PathBuf::from)
        .or_else(|_| env::var("LIBTORCH").map(|t| PathBuf::from(t).join("lib")))
        .expect("neither DEP_TCH_LIBTORCH_LIB (from torch-sys) nor LIBTORCH is set: run scripts/setup-libtorch.sh");
    let lib_dir = lib_dir
        .canonicalize()
        .unwrap_or_else(|e| panic!("libtorch library directory {}: {e}", lib_dir.display()));
    let torch_root = lib_dir
        .parent()
        .expect("libtorch lib dir has a parent")
        .to_path_buf();
    let include = torch_root.join("include");
    let api_include = include.join("torch/csrc/api/include");
    assert!(
        include.join("c10/core/CPUAllocator.h").exists(),
        "{}: libtorch headers not found (c10/core/CPUAllocator.h)",
        include.display()
    );

    let cuda = env::var_os("CARGO_FEATURE_CUDA").is_some();
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file("shim/counters.cpp")
        .file("shim/aten_call.cpp")
        .include(&include)
        .include(&api_include)
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .warnings(false);
    if cuda {
        let cuda_include = find_cuda_include(&torch_root).unwrap_or_else(|| {
            panic!(
                "feature `cuda`: no CUDA headers (cuda_runtime_api.h and crt/host_config.h) found next to {} \
                 or in CUDA_HOME; install nvidia-cuda-runtime and nvidia-cuda-crt (scripts/setup-libtorch.sh does)",
                torch_root.display()
            )
        });
        build.include(&cuda_include).define("MEMCAL_CUDA", None);
    }
    build.compile("memcal_counters");

    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    if cuda {
        println!("cargo:rustc-link-search=native={}", lib_dir.display());
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-lc10_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}

/// The CUDA include directory: `CUDA_HOME/include`, or the pip `nvidia/cu*/include` (or
/// `nvidia/cuda_runtime/include`) next to the torch package.
fn find_cuda_include(torch_root: &Path) -> Option<PathBuf> {
    let ok =
        |d: &Path| d.join("cuda_runtime_api.h").exists() && d.join("crt/host_config.h").exists();
    if let Some(home) = env::var_os("CUDA_HOME") {
        let d = PathBuf::from(home).join("include");
        if ok(&d) {
            return Some(d);
        }
    }
    let nvidia = torch_root.parent()?.join("nvidia");
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(&nvidia)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("include")))
        .collect();
    candidates.sort();
    candidates.into_iter().rev().find(|d| ok(d))
}
