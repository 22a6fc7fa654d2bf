//! The fit: six non-negative factors minimising the weighted squared relative error of the
//! completed runs, with every out-of-memory run as a soft inequality, solved as a convex QP by
//! Clarabel.
//!
//! With z = features / measured and weight w, a completed run contributes w (a·z - 1)², so the
//! whole quadratic part is ‖R [a; 1]‖² with R the triangular factor of the stacked rows
//! √w [z, -1]: the engine aggregates R per family ([`Normal`]) and a refit only stacks blocks. An out-of-memory run
//! at capacity C gives u = (1 + headroom) x / C and the constraint u·a + s ≥ 1 with a slack s
//! penalised by `oom_penalty` · s². Only the violated constraints are handed to the solver: the
//! engine solves, adds every out-of-memory row the solution violates, and solves again until
//! none is violated (an exact method: a satisfied row's optimal slack is zero and its penalty
//! term has zero gradient there).

use crate::features::N_FEATURES;
use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSettingsBuilder, DefaultSolver, IPSolver, SolverStatus, SupportedConeT,
};
use serde::Serialize;

/// Width of an augmented row [√w z, -√w].
const K: usize = N_FEATURES + 1;

/// The completed runs of a set, aggregated: the upper-triangular factor R of the stacked rows
/// √w [z, -1] (a streaming QR by Givens rotations), so that Σ w (a·z - 1)² = ‖R [a; 1]‖²
/// exactly, whatever the number of rows. Blocks combine by stacking their factors.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Normal {
    /// Upper-triangular factor, K x K.
    pub r: [[f64; K]; K],
    /// Σ w.
    pub w: f64,
    /// Number of runs.
    pub n: u64,
}

impl Normal {
    /// Rotates one augmented row into the factor.
    fn absorb(&mut self, mut v: [f64; K]) {
        for k in 0..K {
            if v[k] == 0.0 {
                continue;
            }
            let (a, b) = (self.r[k][k], v[k]);
            let h = (a * a + b * b).sqrt();
            let (c, s) = (a / h, b / h);
            self.r[k][k] = h;
            v[k] = 0.0;
            for (x, y) in self.r[k][k + 1..].iter_mut().zip(&mut v[k + 1..]) {
                let (p, q) = (*x, *y);
                *x = c * p + s * q;
                *y = c * q - s * p;
            }
        }
    }

    /// Adds one completed run: features x, measured bytes m, weight w.
    pub fn add_run(&mut self, x: &[f64; N_FEATURES], measured: f64, weight: f64) {
        let sw = weight.sqrt();
        let mut v = [0.0; K];
        for i in 0..N_FEATURES {
            v[i] = sw * x[i] / measured;
        }
        v[N_FEATURES] = -sw;
        self.absorb(v);
        self.w += weight;
        self.n += 1;
    }

    /// Adds another block (in the caller's fixed order).
    pub fn add(&mut self, o: &Normal) {
        for row in &o.r {
            self.absorb(*row);
        }
        self.w += o.w;
        self.n += o.n;
    }

    /// Σ w (a·z - 1)².
    pub fn squared_error(&self, a: &[f64; N_FEATURES]) -> f64 {
        let mut x = [1.0; K];
        x[..N_FEATURES].copy_from_slice(a);
        self.r
            .iter()
            .map(|row| {
                let v: f64 = row.iter().zip(&x).map(|(p, q)| p * q).sum();
                v * v
            })
            .sum()
    }
}

/// What one fit produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitOutcome {
    pub factors: [f64; N_FEATURES],
    /// Completed runs in the objective.
    pub completed_runs: u64,
    /// Out-of-memory runs (constraints) offered to the fit.
    pub oom_runs: u64,
    /// Out-of-memory runs whose constraint the solution misses (slack > 0).
    pub oom_short: u64,
    /// Out-of-memory rows handed to the solver (the rest were satisfied without).
    pub oom_working_set: u64,
    /// Features no completed run has (all zero): fixed at the fallback value, not fitted.
    pub unsupported_features: Vec<String>,
    /// Σ w (a·z - 1)² + penalty Σ s² at the solution.
    pub objective: f64,
    /// Clarabel's status of the last solve (`Solved` unless something is wrong), or `no-solve`
    /// when nothing was free to fit.
    pub solver_status: String,
    /// Solves made (constraint generation rounds).
    pub solves: u32,
}

/// Fits the factors. `ooms` are the constraint vectors u = (1 + headroom) x / C in a fixed order;
/// `fallback` gives the value of every feature no completed run supports.
pub fn fit(
    normal: &Normal,
    ooms: &[[f64; N_FEATURES]],
    penalty: f64,
    fallback: &[f64; N_FEATURES],
) -> FitOutcome {
    // Column norms of R: √(Σ w z_k²); zero for a feature no completed run has.
    let norm: Vec<f64> = (0..N_FEATURES)
        .map(|k| {
            normal
                .r
                .iter()
                .map(|row| row[k] * row[k])
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let free: Vec<usize> = (0..N_FEATURES).filter(|&k| norm[k] > 0.0).collect();
    let unsupported_features = (0..N_FEATURES)
        .filter(|k| !free.contains(k))
        .map(|k| crate::features::FEATURE_NAMES[k].to_string())
        .collect();
    let mut a = [0.0; N_FEATURES];
    for k in 0..N_FEATURES {
        if !free.contains(&k) {
            a[k] = fallback[k];
        }
    }
    let mut out = FitOutcome {
        factors: a,
        completed_runs: normal.n,
        oom_runs: ooms.len() as u64,
        oom_short: 0,
        oom_working_set: 0,
        unsupported_features,
        objective: 0.0,
        solver_status: "no-solve".into(),
        solves: 0,
    };
    if !free.is_empty() {
        // Scale the free variables to unit column norm: b = d a.
        let d: Vec<f64> = free.iter().map(|&k| norm[k]).collect();
        let nf = free.len();
        // Residual rows: R' b + r0 with R' = R[:, free] / d and r0 = R[:, 6] (unsupported
        // columns of R are zero, so fixed features add nothing here).
        // The whole objective is divided by Σw (same minimiser) so that t is an RMS relative
        // error of order 0.1 whatever the number of rows.
        let sw = normal.w.sqrt();
        let rs: Vec<Vec<f64>> = normal
            .r
            .iter()
            .map(|row| (0..nf).map(|i| row[free[i]] / d[i] / sw).collect())
            .collect();
        let r0: Vec<f64> = normal.r.iter().map(|row| row[N_FEATURES] / sw).collect();
        let penalty_scaled = penalty / normal.w;
        // Constraint rows in scaled terms: u'·b + s ≥ rhs, rhs = 1 - u_fixed·a_fixed.
        let scaled: Vec<(Vec<f64>, f64)> = ooms
            .iter()
            .map(|u| {
                let us = (0..nf).map(|i| u[free[i]] / d[i]).collect();
                let fixed: f64 = (0..N_FEATURES)
                    .filter(|k| !free.contains(k))
                    .map(|k| u[k] * a[k])
                    .sum();
                (us, 1.0 - fixed)
            })
            .collect();
        let mut working: Vec<usize> = Vec::new();
        let mut in_working = vec![false; ooms.len()];
        loop {
            let (b, status) = solve(&rs, &r0, &scaled, &working, penalty_scaled);
            out.solves += 1;
            out.solver_status = format!("{status:?}");
            for i in 0..nf {
                a[free[i]] = (b[i] / d[i]).max(0.0);
            }
            let violated: Vec<usize> = (0..ooms.len())
                .filter(|&j| !in_working[j] && dot(&ooms[j], &a) < 1.0 - 1e-9)
                .collect();
            if violated.is_empty() || out.solves >= 64 {
                break;
            }
            for j in violated {
                in_working[j] = true;
                working.push(j);
            }
            working.sort_unstable();
        }
        out.oom_working_set = working.len() as u64;
        out.factors = a;
    }
    let a = out.factors;
    let mut obj = normal.squared_error(&a);
    for u in ooms {
        let short = 1.0 - dot(u, &a);
        if short > 1e-9 {
            out.oom_short += 1;
            obj += penalty * short * short;
        }
    }
    out.objective = obj;
    out
}

fn dot(a: &[f64; N_FEATURES], b: &[f64; N_FEATURES]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Minimises ‖[R' b + r0; √penalty s]‖ (the square root of the objective, same minimiser, but
/// a linear objective over a second-order cone, which the interior-point method solves to full
/// accuracy in b) subject to b ≥ 0 and u'_j·b + s_j ≥ rhs_j for j in `working`.
///
/// Variables x = [b (nf), s (nw), t]; minimise t. Rows: nf + nw non-negative ones (b ≥ 0, then
/// the constraints), then one second-order cone t ≥ ‖(R' b + r0, √penalty s)‖.
fn solve(
    rs: &[Vec<f64>],
    r0: &[f64],
    rows: &[(Vec<f64>, f64)],
    working: &[usize],
    penalty: f64,
) -> (Vec<f64>, SolverStatus) {
    let nf = rs[0].len();
    let nw = working.len();
    let n = nf + nw + 1;
    let nn = nf + nw; // non-negative rows
    let soc = 1 + rs.len() + nw;
    let m = nn + soc;
    let sp = penalty.sqrt();
    let p = CscMatrix::new(n, n, vec![0; n + 1], Vec::new(), Vec::new());
    let mut c = vec![0.0; n];
    c[n - 1] = 1.0;
    // A x + s = rhs with s in the cones: s = rhs - A x.
    let mut colptr = vec![0usize];
    let mut rowval = Vec::new();
    let mut nzval = Vec::new();
    for i in 0..nf {
        rowval.push(i);
        nzval.push(-1.0);
        for (k, &j) in working.iter().enumerate() {
            let v = rows[j].0[i];
            if v != 0.0 {
                rowval.push(nf + k);
                nzval.push(-v);
            }
        }
        for (r, row) in rs.iter().enumerate() {
            if row[i] != 0.0 {
                rowval.push(nn + 1 + r);
                nzval.push(-row[i]);
            }
        }
        colptr.push(rowval.len());
    }
    for k in 0..nw {
        rowval.push(nf + k);
        nzval.push(-1.0);
        rowval.push(nn + 1 + rs.len() + k);
        nzval.push(-sp);
        colptr.push(rowval.len());
    }
    rowval.push(nn);
    nzval.push(-1.0);
    colptr.push(rowval.len());
    let amat = CscMatrix::new(m, n, colptr, rowval, nzval);
    let mut rhs = vec![0.0; nf];
    rhs.extend(working.iter().map(|&j| -rows[j].1));
    rhs.push(0.0);
    rhs.extend_from_slice(r0);
    rhs.extend(std::iter::repeat_n(0.0, nw));
    let cones = [
        SupportedConeT::NonnegativeConeT(nn),
        SupportedConeT::SecondOrderConeT(soc),
    ];
    let settings = DefaultSettingsBuilder::default()
        .verbose(false)
        .tol_gap_abs(1e-12)
        .tol_gap_rel(1e-11)
        .tol_feas(1e-11)
        .max_iter(400)
        .build()
        .expect("valid Clarabel settings");
    let mut solver = DefaultSolver::new(&p, &c, &amat, &rhs, &cones, settings)
        .expect("the problem's dimensions agree by construction");
    solver.solve();
    (solver.solution.x[..nf].to_vec(), solver.solution.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_exact_factors() {
        let truth = [1.2, 0.9, 1.3, 3.6, 0.0, 2.0];
        let mut n = Normal::default();
        let mut s = 1u64;
        for _ in 0..50 {
            let mut x = [0.0; N_FEATURES];
            for v in &mut x {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *v = ((s >> 33) % 1000) as f64 * 1e6;
            }
            let m = dot(&truth, &x);
            n.add_run(&x, m, 1.0);
        }
        let out = fit(&n, &[], 10.0, &[0.0; N_FEATURES]);
        for (a, t) in out.factors.iter().zip(&truth) {
            assert!((a - t).abs() < 1e-6, "{:?} {:?}", out.factors, out);
        }
    }
}
