//! Memory counters behind one interface: the counting CPU allocator of the shim, or (feature
//! `cuda`) the CUDA caching allocator's statistics. All values are raw bytes.

use std::ffi::{c_char, c_int, CStr};

extern "C" {
    fn memcal_cpu_install(err: *mut c_char, err_len: usize) -> c_int;
    fn memcal_cpu_installed() -> c_int;
    fn memcal_cpu_stats(current: *mut u64, peak: *mut u64);
    fn memcal_cpu_reset_peak();
    fn memcal_cpu_set_cap(bytes: u64);
    fn memcal_cpu_refused() -> u64;
    fn memcal_autocast(cuda: c_int, enabled: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn memcal_autocast_enabled(cuda: c_int) -> c_int;
    fn memcal_torch_version(buf: *mut c_char, len: usize);
    fn memcal_has_cuda_support() -> c_int;
}

#[cfg(feature = "cuda")]
extern "C" {
    fn memcal_cuda_device_count() -> c_int;
    fn memcal_cuda_init(dev: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn memcal_cuda_stats(dev: c_int, out: *mut u64, err: *mut c_char, err_len: usize) -> c_int;
    fn memcal_cuda_reset_peak(dev: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn memcal_cuda_set_fraction(
        dev: c_int,
        fraction: f64,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn memcal_cuda_synchronize(dev: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn memcal_cuda_properties(
        dev: c_int,
        name: *mut c_char,
        name_len: usize,
        total: *mut u64,
        cudart: *mut std::ffi::c_long,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

const MSG: usize = 4096;

fn call(f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), String> {
    let mut buf = vec![0 as c_char; MSG];
    if f(buf.as_mut_ptr(), MSG) == 0 {
        Ok(())
    } else {
        Err(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }
}

/// The torch version of the loaded libtorch, e.g. `2.11.0`.
pub fn torch_version() -> String {
    let mut buf = vec![0 as c_char; 256];
    unsafe { memcal_torch_version(buf.as_mut_ptr(), buf.len()) };
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// True when this binary was built with the `cuda` feature.
pub fn built_with_cuda() -> bool {
    unsafe { memcal_has_cuda_support() != 0 }
}

/// Installs the counting CPU allocator (idempotent). Every CPU tensor allocated afterwards, from
/// any thread, is counted exactly.
pub fn install_cpu_counter() -> Result<(), String> {
    call(|e, n| unsafe { memcal_cpu_install(e, n) })
}

/// True when the counting allocator is the active CPU allocator.
pub fn cpu_counter_installed() -> bool {
    unsafe { memcal_cpu_installed() != 0 }
}

/// Bytes currently allocated and the peak since the last reset, on the counting CPU allocator.
pub fn cpu_stats() -> (u64, u64) {
    let (mut c, mut p) = (0u64, 0u64);
    unsafe { memcal_cpu_stats(&mut c, &mut p) };
    (c, p)
}

/// Resets the CPU peak to the current level.
pub fn cpu_reset_peak() {
    unsafe { memcal_cpu_reset_peak() }
}

/// Sets (Some) or clears (None) the CPU cap: an allocation that would take the total past it is
/// refused with a `c10::OutOfMemoryError` ("CPU out of memory ...").
pub fn cpu_set_cap(bytes: Option<u64>) {
    unsafe { memcal_cpu_set_cap(bytes.unwrap_or(0)) }
}

/// How many allocations the cap has refused so far.
pub fn cpu_refused() -> u64 {
    unsafe { memcal_cpu_refused() }
}

/// One reading of a device's allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub allocated: u64,
    pub allocated_peak: u64,
    pub reserved: u64,
    pub reserved_peak: u64,
}

/// Where a run's tensors live and how its memory is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    Cuda(usize),
}

impl Backend {
    pub fn tch_device(self) -> tch::Device {
        match self {
            Backend::Cpu => tch::Device::Cpu,
            Backend::Cuda(i) => tch::Device::Cuda(i),
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda(_) => "cuda",
        }
    }

    pub fn allocator_name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu-counting-allocator",
            Backend::Cuda(_) => "cuda-caching-allocator",
        }
    }

    /// Initialises the device in torch (CUDA: lazy init, current device); a no-op on CPU.
    pub fn init(self) -> Result<(), String> {
        match self {
            Backend::Cpu => Ok(()),
            #[cfg(feature = "cuda")]
            Backend::Cuda(i) => call(|e, n| unsafe { memcal_cuda_init(i as c_int, e, n) }),
            #[cfg(not(feature = "cuda"))]
            Backend::Cuda(_) => Err(no_cuda()),
        }
    }

    /// Waits for all queued work on the device.
    pub fn synchronize(self) -> Result<(), String> {
        match self {
            Backend::Cpu => Ok(()),
            #[cfg(feature = "cuda")]
            Backend::Cuda(i) => call(|e, n| unsafe { memcal_cuda_synchronize(i as c_int, e, n) }),
            #[cfg(not(feature = "cuda"))]
            Backend::Cuda(_) => Err(no_cuda()),
        }
    }

    /// Current and peak levels. On CPU, reserved equals allocated (the counter has no cache).
    pub fn read(self) -> Result<Reading, String> {
        match self {
            Backend::Cpu => {
                let (c, p) = cpu_stats();
                Ok(Reading {
                    allocated: c,
                    allocated_peak: p,
                    reserved: c,
                    reserved_peak: p,
                })
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(i) => {
                let mut out = [0u64; 4];
                call(|e, n| unsafe { memcal_cuda_stats(i as c_int, out.as_mut_ptr(), e, n) })?;
                Ok(Reading {
                    allocated: out[0],
                    allocated_peak: out[1],
                    reserved: out[2],
                    reserved_peak: out[3],
                })
            }
            #[cfg(not(feature = "cuda"))]
            Backend::Cuda(_) => Err(no_cuda()),
        }
    }

    /// Resets the peaks to the current levels.
    pub fn reset_peak(self) -> Result<(), String> {
        match self {
            Backend::Cpu => {
                cpu_reset_peak();
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(i) => call(|e, n| unsafe { memcal_cuda_reset_peak(i as c_int, e, n) }),
            #[cfg(not(feature = "cuda"))]
            Backend::Cuda(_) => Err(no_cuda()),
        }
    }

    /// Emulates a smaller device: a hard cap on CPU, `setMemoryFraction` on CUDA.
    pub fn set_cap(self, bytes: u64, capacity: u64) -> Result<(), String> {
        match self {
            Backend::Cpu => {
                let _ = capacity;
                cpu_set_cap(Some(bytes));
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(i) => {
                let fraction = bytes as f64 / capacity as f64;
                if !(fraction > 0.0 && fraction <= 1.0) {
                    return Err(format!(
                        "--cap-gib: {bytes} bytes is not within the device's {capacity} bytes"
                    ));
                }
                call(|e, n| unsafe { memcal_cuda_set_fraction(i as c_int, fraction, e, n) })
            }
            #[cfg(not(feature = "cuda"))]
            Backend::Cuda(_) => Err(no_cuda()),
        }
    }

    /// Turns bf16 autocast on or off for this device.
    pub fn autocast(self, enabled: bool) -> Result<(), String> {
        let cuda = matches!(self, Backend::Cuda(_)) as c_int;
        call(|e, n| unsafe { memcal_autocast(cuda, enabled as c_int, e, n) })
    }

    /// Whether autocast is on for this device.
    pub fn autocast_enabled(self) -> bool {
        let cuda = matches!(self, Backend::Cuda(_)) as c_int;
        unsafe { memcal_autocast_enabled(cuda) != 0 }
    }
}

#[cfg(not(feature = "cuda"))]
fn no_cuda() -> String {
    "this memcal-measure was built without CUDA support (rebuild with `--features cuda`)".into()
}

/// A CUDA device's properties.
#[derive(Debug, Clone)]
pub struct CudaProperties {
    pub name: String,
    pub total_bytes: u64,
    /// e.g. `13.0`
    pub runtime: String,
}

/// Number of CUDA devices this binary can use (0 without the `cuda` feature).
pub fn cuda_device_count() -> usize {
    #[cfg(feature = "cuda")]
    {
        (unsafe { memcal_cuda_device_count() }).max(0) as usize
    }
    #[cfg(not(feature = "cuda"))]
    {
        0
    }
}

/// Name, memory and runtime version of CUDA device `i`.
pub fn cuda_properties(i: usize) -> Result<CudaProperties, String> {
    #[cfg(feature = "cuda")]
    {
        let mut name = vec![0 as c_char; 512];
        let mut total = 0u64;
        let mut rt: std::ffi::c_long = 0;
        call(|e, n| unsafe {
            memcal_cuda_properties(
                i as c_int,
                name.as_mut_ptr(),
                name.len(),
                &mut total,
                &mut rt,
                e,
                n,
            )
        })?;
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(CudaProperties {
            name,
            total_bytes: total,
            runtime: format!("{}.{}", rt / 1000, (rt % 1000) / 10),
        })
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = i;
        Err(no_cuda())
    }
}
