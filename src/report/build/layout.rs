//! How the runs tables are laid out over pages: one runs page, or (above the page limit) one
//! per family, each family in pages of at most the limit in run-id order. Pure, so the page
//! links are unit-tested here.

use crate::format as fmt;
use crate::report::view::Link;

/// The links of the runs pages.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Links {
    /// Per family: the links to its runs pages (empty when the table is not split).
    pub family_pages: Vec<Vec<Link>>,
    /// The runs pages the index and the nav link: the one runs table, or each family's first
    /// page.
    pub runs: Vec<Link>,
}

/// The links for `families` (their page `files`, `family-<slug>.html`, and row `counts`), split
/// by family or not, at most `runs_per_page` rows a page.
pub(super) fn links(
    families: &[String],
    files: &[&str],
    counts: &[usize],
    split: bool,
    runs_per_page: usize,
) -> Links {
    let family_pages: Vec<Vec<Link>> = if split {
        families
            .iter()
            .enumerate()
            .map(|(k, f)| {
                let stem = files[k].trim_start_matches("family-");
                let n = counts[k];
                let pages = n.div_ceil(runs_per_page).max(1);
                (0..pages)
                    .map(|p| Link {
                        href: if p == 0 {
                            format!("runs-{stem}")
                        } else {
                            format!("runs-{}.p{}.html", stem.trim_end_matches(".html"), p + 1)
                        },
                        text: if pages == 1 {
                            format!("Runs of {f}")
                        } else {
                            format!(
                                "page {} of {pages}: runs {} to {}",
                                p + 1,
                                fmt::count((p * runs_per_page + 1) as u64),
                                fmt::count(((p + 1) * runs_per_page).min(n) as u64)
                            )
                        },
                    })
                    .collect()
            })
            .collect()
    } else {
        Vec::new()
    };
    let runs: Vec<Link> = if split {
        families
            .iter()
            .zip(&family_pages)
            .map(|(f, pages)| Link {
                href: pages[0].href.clone(),
                text: format!("Runs of {f}"),
            })
            .collect()
    } else {
        vec![Link {
            href: "runs.html".into(),
            text: "Runs table".into(),
        }]
    };
    Links { family_pages, runs }
}

/// Each family's page file, `family-<slug>.html`; a slug two families share gets `-2`, `-3`,
/// ... in family order.
pub(super) fn family_files(families: &[String]) -> std::collections::BTreeMap<String, String> {
    let mut family_files = std::collections::BTreeMap::new();
    let mut used = std::collections::BTreeSet::new();
    for f in families {
        let base = format!("family-{}", fmt::slug(f));
        let mut name = format!("{base}.html");
        let mut k = 2;
        while used.contains(&name) {
            name = format!("{base}-{k}.html");
            k += 1;
        }
        used.insert(name.clone());
        family_files.insert(f.clone(), name);
    }
    family_files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_sharing_a_slug_get_numbered_files() {
        let fams: Vec<String> = ["a b", "a-b", "c"].iter().map(|s| s.to_string()).collect();
        let files = family_files(&fams);
        assert_eq!(files["a b"], "family-a-b.html");
        assert_eq!(files["a-b"], "family-a-b-2.html");
        assert_eq!(files["c"], "family-c.html");
    }

    #[test]
    fn one_runs_page_when_not_split() {
        let l = links(&["a".into()], &["family-a.html"], &[5], false, 2);
        assert!(l.family_pages.is_empty());
        assert_eq!(l.runs.len(), 1);
        assert_eq!(l.runs[0].href, "runs.html");
    }

    #[test]
    fn split_pages_cover_every_row_once() {
        let l = links(
            &["a".into(), "b".into()],
            &["family-a.html", "family-b.html"],
            &[5, 2],
            true,
            2,
        );
        // a: 5 rows at 2 a page -> 3 pages; b: 2 rows -> 1 page.
        assert_eq!(l.family_pages[0].len(), 3);
        assert_eq!(l.family_pages[1].len(), 1);
        assert_eq!(l.family_pages[0][0].href, "runs-a.html");
        assert_eq!(l.family_pages[0][2].href, "runs-a.p3.html");
        assert_eq!(l.family_pages[0][2].text, "page 3 of 3: runs 5 to 5");
        assert_eq!(l.family_pages[1][0].text, "Runs of b");
        assert_eq!(l.runs[0].href, "runs-a.html");
        assert_eq!(l.runs[1].text, "Runs of b");
    }
}
