//! What every section of the build looks up besides the calibration: the factors, the prose,
//! the families and their page files, and how a regime, a card and a check are named.

use super::*;

/// Everything the build looks up besides the calibration.
#[derive(Debug, Clone)]
pub(super) struct Ctx<'a> {
    pub cal: &'a Calibration,
    pub factors: &'a FactorsFile,
    pub prose: &'a ProseInput,
    /// Family -> page file.
    pub family_files: BTreeMap<String, String>,
    /// Families in chart-legend order.
    pub families: Vec<String>,
    /// What the charts' runs are, e.g. `CPU runs`: every counted row's device, when they share
    /// one; `runs` otherwise.
    pub runs_label: String,
}

impl Ctx<'_> {
    /// `CPU` or `GPU` for a regime; a CPU regime is never labelled a GPU result.
    pub(super) fn device(&self, regime: &str) -> &'static str {
        device_label(self.factors, regime)
    }

    /// `cpu-free (CPU)`.
    pub(super) fn regime_label(&self, regime: &str) -> String {
        format!("{regime} ({})", self.device(regime))
    }

    /// The card's printed name in the regime's list or the planner's, else its size.
    pub(super) fn card_name(&self, regime: &str, bytes: u64) -> String {
        let listed = self
            .factors
            .regimes
            .get(regime)
            .into_iter()
            .flat_map(|r| r.cards.iter())
            .chain(self.factors.cards.iter())
            .find(|c| c.bytes == bytes);
        match listed {
            Some(c) => c.name.clone(),
            None => units::both(bytes as f64),
        }
    }

    pub(super) fn family_href(&self, family: &str) -> String {
        self.family_files
            .get(family)
            .cloned()
            .unwrap_or_else(|| "index.html".to_string())
    }

    pub(super) fn block(&self, name: &str) -> String {
        self.prose.blocks.get(name).cloned().unwrap_or_default()
    }

    pub(super) fn row(&self, run_id: &str) -> Option<&RowResult> {
        self.cal
            .rows
            .binary_search_by(|r| r.run_id.as_str().cmp(run_id))
            .ok()
            .map(|i| &self.cal.rows[i])
    }

    /// `run-id on 8 GiB`.
    pub(super) fn check_ref(&self, c: &CheckRef) -> String {
        let regime = self.row(&c.run_id).map_or("", |r| r.regime.as_str());
        format!("{} on {}", c.run_id, self.card_name(regime, c.card_bytes))
    }
}

/// Every family on the site, sorted: the engine's list plus any family a row names.
pub(crate) fn site_families(cal: &Calibration) -> Vec<String> {
    let mut names: std::collections::BTreeSet<&str> =
        cal.families.keys().map(|f| f.as_str()).collect();
    let mut last = None;
    for r in &cal.rows {
        if last != Some(r.family.as_str()) {
            names.insert(r.family.as_str());
            last = Some(r.family.as_str());
        }
    }
    names.into_iter().map(|f| f.to_string()).collect()
}

/// What the charts' runs are: `CPU runs` when every counted row's regime has one device,
/// `runs` otherwise.
fn runs_label(cal: &Calibration, factors: &FactorsFile) -> String {
    let mut devices: Vec<&str> = Vec::new();
    let mut last = None;
    for r in &cal.rows {
        if last == Some(r.regime.as_str()) {
            continue;
        }
        last = Some(r.regime.as_str());
        let d = device_label(factors, &r.regime);
        if !devices.contains(&d) {
            devices.push(d);
        }
    }
    match devices.as_slice() {
        [one] => format!("{one} runs"),
        _ => "runs".to_string(),
    }
}

impl<'a> Ctx<'a> {
    pub(super) fn new(
        cal: &'a Calibration,
        factors: &'a FactorsFile,
        prose: &'a ProseInput,
    ) -> Self {
        let families = site_families(cal);
        Ctx {
            cal,
            factors,
            prose,
            family_files: layout::family_files(&families),
            families,
            runs_label: runs_label(cal, factors),
        }
    }

    /// Each family's rows (in [`Ctx::families`] order), as indices into `cal.rows` (run-id
    /// order). A row's family is found by its name's shared allocation first, then by the name.
    pub(super) fn rows_by_family(&self) -> Vec<Vec<u32>> {
        let mut fam_rows: Vec<Vec<u32>> = vec![Vec::new(); self.families.len()];
        let mut by_alloc: std::collections::HashMap<usize, usize> = Default::default();
        for (i, r) in self.cal.rows.iter().enumerate() {
            let k = *by_alloc
                .entry(std::sync::Arc::as_ptr(&r.family.0) as usize)
                .or_insert_with(|| {
                    self.families
                        .binary_search_by(|f| f.as_str().cmp(r.family.as_str()))
                        .expect("every row's family is listed")
                });
            fam_rows[k].push(i as u32);
        }
        fam_rows
    }
}
