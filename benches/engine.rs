//! The engine's fit + every held-out refit + all metrics on 1,000,000 synthetic rows over 100
//! architecture families (target: at most 10 s on 2 cores). The dataset is built once, outside
//! the timing.

use criterion::{criterion_group, criterion_main, Criterion};
use memcal::engine::{calibrate, synthetic};
use std::hint::black_box;
use std::time::Duration;

fn engine(c: &mut Criterion) {
    let truth = [1.2, 0.9, 1.3, 3.6, 5.2, 2.0];
    let ds = synthetic::dataset(1_000_000, 100, truth, 0.1, 7);
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("calibrate_1M_rows_100_families", |b| {
        b.iter(|| black_box(calibrate(black_box(&ds))))
    });
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
