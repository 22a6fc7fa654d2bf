//! The counting CPU allocator counts exactly. This file holds a single test so that no other test
//! thread allocates tensors while it reads the global counter.

use memcal_measure::counters;
use tch::{Device, Kind, Tensor};

#[test]
fn counting_allocator_is_exact_and_caps_allocations() {
    counters::install_cpu_counter().expect("install the counting allocator");
    assert!(counters::cpu_counter_installed());

    let (before, _) = counters::cpu_stats();
    counters::cpu_reset_peak();
    let t = Tensor::zeros([25_000_000], (Kind::Float, Device::Cpu)); // 100,000,000 bytes
    let (during, peak) = counters::cpu_stats();
    assert_eq!(
        during - before,
        100_000_000,
        "a 100,000,000-byte tensor reads exactly"
    );
    assert_eq!(peak, during);
    drop(t);
    let (after, peak_after) = counters::cpu_stats();
    assert_eq!(after, before, "freeing gives every byte back");
    assert_eq!(peak_after, during, "the peak survives the free until reset");
    counters::cpu_reset_peak();
    assert_eq!(counters::cpu_stats().1, after);

    // Allocations from other threads are counted too (torch's intra-op pool, Rust threads).
    let handles: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| Tensor::ones([1_000_000], (Kind::Uint8, Device::Cpu))))
        .collect();
    let ts: Vec<Tensor> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(counters::cpu_stats().0 - before, 4_000_000);
    drop(ts);
    assert_eq!(counters::cpu_stats().0, before);

    // Past the cap, torch reports a real out-of-memory error and nothing is leaked.
    let refused = counters::cpu_refused();
    counters::cpu_set_cap(Some(before + 50_000_000));
    let err = Tensor::f_zeros([25_000_000], (Kind::Float, Device::Cpu)).expect_err("over the cap");
    let text = err.to_string();
    assert!(text.contains("out of memory"), "error text: {text}");
    assert_eq!(counters::cpu_refused(), refused + 1);
    assert_eq!(counters::cpu_stats().0, before);
    let small = Tensor::f_zeros([1_000], (Kind::Float, Device::Cpu)).expect("under the cap");
    assert_eq!(counters::cpu_stats().0 - before, 4_000);
    drop(small);
    counters::cpu_set_cap(None);
}
