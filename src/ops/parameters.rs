//! What an op owns: its trainable parameter tensors and the buffers torch registers for it.

use super::Op;

impl Op {
    /// Shapes of the trainable parameter tensors this op owns (a tied weight is owned by the
    /// embedding and not listed here).
    pub fn parameter_tensors(&self) -> Vec<Vec<u64>> {
        let mut p = Vec::new();
        self.family().parameter_tensors(self, &mut p);
        p
    }

    /// Trainable parameters this op owns.
    pub fn parameters(&self) -> u64 {
        self.parameter_tensors()
            .iter()
            .map(|s| s.iter().fold(1u64, |a, v| a.saturating_mul(*v)))
            .fold(0u64, u64::saturating_add)
    }

    /// Buffers torch registers for the op, as (elements, bytes per element). Batch norm keeps
    /// running mean and variance (float32) and a batch counter (int64).
    pub fn buffers(&self) -> Vec<(u64, u64)> {
        self.family().buffers(self)
    }
}
