//! The site's navigation bar and the download links.

use super::*;

pub(super) fn downloads() -> Vec<Link> {
    vec![
        Link {
            href: "memory-calibration.json".into(),
            text: "memory-calibration.json (rows, features, predictions)".into(),
        },
        Link {
            href: "memory-calibration.csv".into(),
            text: "memory-calibration.csv".into(),
        },
    ]
}

pub(super) fn nav(runs_pages: &[Link]) -> Vec<Link> {
    let mut v: Vec<Link> = [
        ("index.html#headline", "Headline"),
        (
            "index.html#predicted-against-measured",
            "Predicted against measured",
        ),
        ("index.html#four-ways", "Four ways"),
        ("index.html#did-not-fit", "Did not fit"),
        ("index.html#upper-bound", "Upper bound"),
        ("index.html#planning", "Planning a job"),
        ("index.html#strategies", "Strategies"),
        ("index.html#real-models", "Real models"),
        ("index.html#how", "How"),
        ("index.html#out-of-sample", "Out of sample"),
        ("index.html#known-misses", "Known misses"),
        ("index.html#not-counted", "Not counted"),
        ("index.html#all-runs", "All runs"),
        ("fit.html", "Will it fit?"),
        ("history.html", "Factor history"),
    ]
    .iter()
    .map(|(h, t)| Link {
        href: h.to_string(),
        text: t.to_string(),
    })
    .collect();
    if let [one] = runs_pages {
        v.push(one.clone());
    }
    v
}
