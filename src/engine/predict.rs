//! Every method's prediction of one row: the one place that defines what each method
//! predicts (the bound's ratios and the checks both ask here).

use super::fits::PerFamily;
use super::results::{Bucket, Method, PerMethod, ProfileFits};
use super::Row;
use crate::features::Precision;
use crate::plan;
use std::collections::BTreeMap;

/// What the predictions are made from: the rows, each profile's fits and the held-out factors.
pub(super) struct Predictor<'a> {
    pub rows: &'a [Row],
    pub fits: &'a BTreeMap<Precision, ProfileFits>,
    pub held: &'a BTreeMap<Precision, PerFamily>,
    pub group: &'a BTreeMap<Precision, PerFamily>,
}

impl Predictor<'_> {
    /// Row `i`'s prediction by every method that predicts it (in `bucket`, of family index
    /// `fam`), and its out-of-sample six-factor estimate (the bound's: held out by
    /// architecture for a fitted row, the method of its bucket otherwise).
    pub fn predict(&self, i: usize, bucket: Bucket, fam: usize) -> (PerMethod<f64>, Option<f64>) {
        let r = &self.rows[i];
        let pf = &self.fits[&r.precision];
        let mut m = PerMethod::default();
        m.set(Method::Accelerate, r.accelerate_bytes as f64);
        if let Some(t) = r.textbook_bytes {
            m.set(Method::Textbook, t as f64);
        }
        if let Some(t) = r.simulated_bytes {
            m.set(Method::Simulated, t as f64);
        }
        m.set(
            Method::PlanAsShipped,
            plan::estimate_floored(&pf.file_factors, &r.features, r.floor_bytes),
        );
        let oos;
        match bucket {
            Bucket::Fitted => {
                m.set(
                    Method::PlanRefitInSample,
                    plan::estimate_floored(&pf.shipped.factors, &r.features, r.floor_bytes),
                );
                oos = self.held[&r.precision][fam]
                    .map(|a| plan::estimate_floored(&a, &r.features, r.floor_bytes));
                if let Some(e) = oos {
                    m.set(Method::PlanHeldOutArchitecture, e);
                }
                if let Some(a) = self.group[&r.precision][fam] {
                    m.set(
                        Method::PlanHeldOutImplementation,
                        plan::estimate_floored(&a, &r.features, r.floor_bytes),
                    );
                }
            }
            Bucket::HeldOutRegime => {
                let e = plan::estimate_floored(&pf.shipped.factors, &r.features, r.floor_bytes);
                m.set(Method::PlanHeldOutRegime, e);
                oos = Some(e);
            }
            Bucket::AfterFit => {
                let e = plan::estimate_floored(&pf.file_factors, &r.features, r.floor_bytes);
                m.set(Method::PlanAfterFit, e);
                oos = Some(e);
            }
        }
        (m, oos)
    }
}
