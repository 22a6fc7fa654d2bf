//! 4-bit NF4 packing for QLoRA (Dettmers et al. 2023): a weight stored as two codes a byte
//! with an fp32 absmax per block of [`BLOCK`] elements, dequantized on every use. A leaf: the
//! builder's linear map holds a [`Packed`] weight, and the strategies' protocol packs them.

use tch::{Kind, Tensor};

/// The NF4 code book (QLoRA, Dettmers et al. 2023, Appendix E; bitsandbytes' `NF4` table).
const NF4: [f32; 16] = [
    -1.0,
    -0.696_192_8,
    -0.525_073_05,
    -0.394_917_5,
    -0.284_441_38,
    -0.184_773_43,
    -0.091_050_036,
    0.0,
    0.079_580_3,
    0.160_930_2,
    0.246_112_3,
    0.337_915_24,
    0.440_709_83,
    0.562_617,
    0.722_956_84,
    1.0,
];

/// Elements an absmax block.
pub const BLOCK: i64 = 64;

/// A weight packed as 4-bit NF4: `codes` `[blocks, 32]` uint8 (two codes a byte, the even
/// element in the high nibble), `absmax` `[blocks, 1]` fp32.
pub struct Packed {
    codes: Tensor,
    absmax: Tensor,
    table: Tensor,
    shape: [i64; 2],
}

impl Packed {
    /// Quantizes `w` (`[out, in]`) block by block (the transients of a chunk of blocks only).
    pub fn quantize(w: &Tensor) -> Packed {
        let _g = tch::no_grad_guard();
        let dev = w.device();
        let size = w.size();
        let numel = w.numel() as i64;
        let nb = (numel + BLOCK - 1) / BLOCK;
        let mut flat = w.detach().reshape([-1]);
        if nb * BLOCK > numel {
            flat = Tensor::cat(
                &[
                    flat,
                    Tensor::zeros([nb * BLOCK - numel], (Kind::Float, dev)),
                ],
                0,
            );
        }
        let blocks = flat.view([nb, BLOCK]);
        let absmax = blocks.abs().amax([1], true).clamp_min(1e-12);
        let table = Tensor::from_slice(&NF4).to_device(dev);
        let codes = Tensor::empty([nb, BLOCK / 2], (Kind::Uint8, dev));
        let chunk = 1024;
        for start in (0..nb).step_by(chunk as usize) {
            let len = chunk.min(nb - start);
            let b = blocks.narrow(0, start, len) / absmax.narrow(0, start, len);
            let idx = (b.unsqueeze(-1) - &table)
                .abs()
                .argmin(-1, false)
                .to_kind(Kind::Uint8);
            let hi = idx.slice(1, 0, BLOCK, 2);
            let lo = idx.slice(1, 1, BLOCK, 2);
            codes.narrow(0, start, len).copy_(&(hi * 16 + lo));
        }
        Packed {
            codes,
            absmax,
            table,
            shape: [size[0], size[1]],
        }
    }

    /// The fp32 weight, dequantized in chunks of blocks into one output tensor.
    pub fn dequantize(&self) -> Tensor {
        let _g = tch::no_grad_guard();
        let nb = self.codes.size()[0];
        let out = Tensor::empty([nb, BLOCK], (Kind::Float, self.codes.device()));
        let chunk = (nb / 8).max(256);
        for start in (0..nb).step_by(chunk as usize) {
            let len = chunk.min(nb - start);
            let c = self.codes.narrow(0, start, len);
            let idx = Tensor::stack(&[c.floor_divide_scalar(16), c.bitwise_and(15)], -1)
                .view([-1])
                .to_kind(Kind::Int);
            let vals = self.table.index_select(0, &idx).view([len, BLOCK])
                * self.absmax.narrow(0, start, len);
            out.narrow(0, start, len).copy_(&vals);
        }
        let numel = self.shape[0] * self.shape[1];
        out.view([-1]).narrow(0, 0, numel).view(self.shape)
    }

    /// Bytes stored: the codes and the scales.
    pub fn bytes(&self) -> u64 {
        (self.codes.numel() + 4 * self.absmax.numel()) as u64
    }
}
