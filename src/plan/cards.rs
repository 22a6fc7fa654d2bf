//! The cards people rent: one typed table of real GPUs ([`PRODUCTS`]) with what each device
//! reports as its total memory and where that figure comes from, and the bytes a training job
//! can use of it: the reported total, less the CUDA context ([`CUDA_CONTEXT_BYTES`]), less the
//! caching allocator's reserved overhead as measured on the shipped GPU rows
//! ([`allocator_overhead`]). Adding a card touches [`PRODUCTS`] alone.
//!
//! Two figures per card, because the methods predict two things:
//! - `usable_bytes` = (reported - context) / overhead: what an *allocated*-peak prediction (the
//!   six-factor plan, the simulator's allocated peak, the bounds) is compared with;
//! - `reservable_bytes` = reported - context: what the simulator's *reserved* peak (the
//!   allocator's segments, which already hold the overhead) is compared with.

use crate::engine::Dataset;
use crate::factors::Card;
use crate::run::RunStatus;
use serde::Serialize;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// How a product's total memory was reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// Exact bytes, as CUDA reported them (`cudaMemGetInfo` total / `totalGlobalMem`).
    Bytes(u64),
    /// Hundredths of a GiB as PyTorch prints CUDA's total in an out-of-memory message
    /// ("GPU 0 has a total capacity of 79.11 GiB"), so exact to about 5 MiB.
    GibHundredths(u64),
    /// MiB as `nvidia-smi` prints the total. `nvidia-smi` counts memory the driver keeps for
    /// itself, so CUDA reports a little less (0.5 GiB on the A10 and 0.5 GiB on the H100
    /// below, where both figures are known): these cards' usable bytes are about 0.5 GiB high.
    NvidiaSmiMib(u64),
}

impl Reported {
    pub fn bytes(self) -> u64 {
        match self {
            Reported::Bytes(b) => b,
            Reported::GibHundredths(h) => (h as u128 * GIB as u128 / 100) as u64,
            Reported::NvidiaSmiMib(m) => m * MIB,
        }
    }

    /// Who reported the total, in words.
    pub fn by(self) -> &'static str {
        match self {
            Reported::Bytes(_) | Reported::GibHundredths(_) => "CUDA",
            Reported::NvidiaSmiMib(_) => "nvidia-smi",
        }
    }
}

/// A real product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Product {
    /// The name `plan` prints, with the marketed size.
    pub name: &'static str,
    pub reported: Reported,
    /// Where the reported total comes from.
    pub source: &'static str,
}

/// The real cards, ascending by reported total.
pub const PRODUCTS: &[Product] = &[
    Product {
        name: "A10G 24 GB",
        reported: Reported::GibHundredths(2199),
        source: "PyTorch OOM message on an A10 (zai-org/CogVLM issue 236: \"total capacty of 21.99 GiB\"); the A10G is AWS's A10 with the same 24 GB GDDR6 (nvidia-smi 23028 MiB for both, modal-labs/modal-client PR 2797)",
    },
    Product {
        name: "L4 24 GB",
        reported: Reported::NvidiaSmiMib(23034),
        source: "nvidia-smi total 23034 MiB (modal-labs/modal-client PR 2797)",
    },
    Product {
        name: "RTX 4090 24 GB",
        reported: Reported::GibHundredths(2364),
        source: "PyTorch OOM message on an RTX 4090 (3DTopia/Phidias-Diffusion issue 8: \"total capacty of 23.64 GiB\")",
    },
    Product {
        name: "A100 40 GB",
        reported: Reported::GibHundredths(3959),
        source: "PyTorch OOM message on an A100 40 GB (raoyongming/DenseCLIP issue 52: \"39.59 GiB total capacity\")",
    },
    Product {
        name: "L40S 48 GB",
        reported: Reported::NvidiaSmiMib(46068),
        source: "nvidia-smi total 46068 MiB (modal-labs/modal-client PR 2797)",
    },
    Product {
        name: "H100 80 GB (SXM)",
        reported: Reported::GibHundredths(7911),
        source: "PyTorch OOM message on an H100 80GB HBM3 (vllm-project/vllm issue 27508: \"total capacity of 79.11 GiB\"; nvidia-smi 81559 MiB)",
    },
    Product {
        name: "A100 80 GB",
        reported: Reported::GibHundredths(7914),
        source: "PyTorch OOM message on an A100 80 GB (lianqi1008/Control-GIC issue 6: \"total capacity of 79.14 GiB\")",
    },
    Product {
        name: "H200 141 GB",
        reported: Reported::Bytes(150_109_880_320),
        source: "device.capacity_bytes of the shipped GPU rows (data/runs/cuda, an NVIDIA H200, driver 580, CUDA 13.0)",
    },
];

/// The CUDA context's memory on the device, which no allocator counter sees (the rows record
/// the caching allocator's counters, so the context was not measured here). Not measured:
/// the PyTorch forum's figure for the context PyTorch creates ("depending on the CUDA version,
/// used device etc. you might see an allocation of ~700+MB", discuss.pytorch.org/t/81330;
/// 723 MiB in discuss.pytorch.org/t/73021), taken for every card.
pub const CUDA_CONTEXT_BYTES: u64 = 700 * MIB;

/// Where [`CUDA_CONTEXT_BYTES`] comes from, for the page and `plan`.
pub const CUDA_CONTEXT_SOURCE: &str = "not measured: the PyTorch forum's figure for the CUDA context (\"~700+MB\" depending on CUDA version and device, discuss.pytorch.org/t/81330)";

/// Rows measured at this many allocated bytes or more are the ones the overhead is read on
/// (the accuracy figures' threshold, [`crate::engine::reserved::LARGE_ROW_BYTES`]).
pub const OVERHEAD_MIN_BYTES: u64 = crate::engine::reserved::LARGE_ROW_BYTES;

/// The caching allocator's reserved overhead on the shipped GPU rows: reserved peak over
/// allocated peak of every completed CUDA row of at least [`OVERHEAD_MIN_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AllocatorOverhead {
    pub rows: u64,
    /// The median ratio (the mean of the two middle ones for an even count): the divisor of
    /// the usable bytes.
    pub median_ratio: f64,
    /// The nearest-rank q95 ratio, reported beside it (the overhead is larger in uncapped runs,
    /// where the allocator never has to release its cache).
    pub q95_ratio: f64,
    pub max_ratio: f64,
}

/// The overhead, computed from the rows; `None` without a completed CUDA row.
pub fn allocator_overhead(ds: &Dataset) -> Option<AllocatorOverhead> {
    let mut ratios: Vec<f64> = ds
        .rows
        .iter()
        .filter(|r| r.device_kind.as_str() == "cuda" && r.status == RunStatus::Completed)
        .filter(|r| !r.graph_changed && !r.graph_mismatch)
        .filter_map(|r| match (r.measured_bytes, r.measured_reserved_bytes) {
            (Some(a), Some(s)) if a >= OVERHEAD_MIN_BYTES => Some(s as f64 / a as f64),
            _ => None,
        })
        .collect();
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = if n % 2 == 1 {
        ratios[n / 2]
    } else {
        (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
    };
    Some(AllocatorOverhead {
        rows: n as u64,
        median_ratio: median,
        q95_ratio: crate::engine::nearest_rank(&ratios, 95).unwrap_or(median),
        max_ratio: ratios[n - 1],
    })
}

/// One real card with its usable bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealCard {
    pub name: String,
    pub reported_bytes: u64,
    /// `CUDA` or `nvidia-smi`.
    pub reported_by: &'static str,
    pub context_bytes: u64,
    /// reported - context: what the simulator's reserved peak is compared with.
    pub reservable_bytes: u64,
    /// (reported - context) / the allocator's median overhead: what an allocated-peak
    /// prediction is compared with.
    pub usable_bytes: u64,
    pub source: &'static str,
}

impl RealCard {
    /// The card as the planner's verdicts use it (its usable bytes).
    pub fn card(&self) -> Card {
        Card {
            name: self.name.clone(),
            bytes: self.usable_bytes,
        }
    }
}

/// Every product with its usable bytes under `overhead` (ratio 1 when there is none).
pub fn real_cards(overhead: Option<&AllocatorOverhead>) -> Vec<RealCard> {
    let ratio = overhead.map_or(1.0, |o| o.median_ratio.max(1.0));
    PRODUCTS
        .iter()
        .map(|p| {
            let reported = p.reported.bytes();
            let reservable = reported.saturating_sub(CUDA_CONTEXT_BYTES);
            RealCard {
                name: p.name.to_string(),
                reported_bytes: reported,
                reported_by: p.reported.by(),
                context_bytes: CUDA_CONTEXT_BYTES,
                reservable_bytes: reservable,
                usable_bytes: (reservable as f64 / ratio).floor() as u64,
                source: p.source,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_ascend_and_reported_bytes_convert() {
        assert!(PRODUCTS
            .windows(2)
            .all(|w| w[0].reported.bytes() <= w[1].reported.bytes()));
        assert_eq!(Reported::NvidiaSmiMib(1).bytes(), 1 << 20);
        assert_eq!(Reported::GibHundredths(100).bytes(), 1 << 30);
        let o = AllocatorOverhead {
            rows: 1,
            median_ratio: 1.25,
            q95_ratio: 1.5,
            max_ratio: 2.0,
        };
        let h200 = real_cards(Some(&o)).pop().unwrap();
        assert_eq!(h200.reservable_bytes, 150_109_880_320 - 700 * MIB);
        assert_eq!(
            h200.usable_bytes,
            (h200.reservable_bytes as f64 / 1.25) as u64
        );
    }
}
