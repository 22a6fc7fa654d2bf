//! Prose: Markdown under `data/prose/`, rendered with pulldown-cmark. [`to_html`] is the one
//! function that sets pulldown-cmark's options. Raw HTML in prose is escaped, not passed
//! through, so prose cannot inject markup or script. Prose carries no numbers: every number
//! on a page comes from the view model through a template, or from one of the engine's
//! constants through a [`PLACEHOLDERS`] entry ([`prose_to_html`]).

use pulldown_cmark::{html, Event, Options, Parser, Tag, TagEnd};

/// What prose may write instead of a number, and the engine's constant it stands for:
/// `{within}` is the band of close predictions (`±25%`, [`WITHIN`](crate::engine::WITHIN)),
/// `{features}` the number of the plan's features in words (`six`,
/// [`N_FEATURES`](crate::features::N_FEATURES)).
pub const PLACEHOLDERS: [&str; 2] = ["{within}", "{features}"];

/// The value of a placeholder of [`PLACEHOLDERS`].
pub fn placeholder(name: &str) -> Option<String> {
    match name {
        "{within}" => Some(crate::format::within_band()),
        "{features}" => Some(crate::format::number_word(crate::features::N_FEATURES)),
        _ => None,
    }
}

/// A prose block to HTML, its placeholders replaced by the engine's constants.
pub fn prose_to_html(markdown: &str) -> String {
    let mut md = markdown.to_string();
    for name in PLACEHOLDERS {
        md = md.replace(
            name,
            &placeholder(name).expect("every placeholder has a value"),
        );
    }
    to_html(&md)
}

/// Renders Markdown to HTML (tables, footnotes and strikethrough on; raw HTML shown as text).
pub fn to_html(markdown: &str) -> String {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_FOOTNOTES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    let events = Parser::new_ext(markdown, options).map(|ev| match ev {
        Event::Html(s) | Event::InlineHtml(s) => Event::Text(s),
        other => other,
    });
    let mut out = String::new();
    html::push_html(&mut out, events);
    out
}

/// Renders one line of Markdown inline, for a sentence the page places inside an element of
/// its own (an intro paragraph, a cell): `code`, emphasis, strong, strikethrough and links;
/// no paragraph around it and no block (a block's markup is dropped, its text kept, a space after it); line
/// breaks become spaces; raw HTML is shown as text.
pub fn inline_to_html(markdown: &str) -> String {
    let events =
        Parser::new_ext(markdown, Options::ENABLE_STRIKETHROUGH).filter_map(|ev| match ev {
            Event::Html(s) | Event::InlineHtml(s) => Some(Event::Text(s)),
            Event::SoftBreak | Event::HardBreak => Some(Event::Text(" ".into())),
            Event::Start(Tag::Emphasis | Tag::Strong | Tag::Strikethrough | Tag::Link { .. })
            | Event::End(
                TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Link,
            )
            | Event::Text(_)
            | Event::Code(_) => Some(ev),
            // A block's end separates it from the next one's text.
            Event::End(_) => Some(Event::Text(" ".into())),
            Event::Start(_) | Event::Rule => None,
            other => Some(other),
        });
    let mut out = String::new();
    html::push_html(&mut out, events);
    out.truncate(out.trim_end().len());
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn raw_html_is_text() {
        let h = super::to_html("Hello *there* <script>alert(1)</script>");
        assert!(h.contains("<em>there</em>"));
        assert!(h.contains("&lt;script&gt;"));
        assert!(!h.contains("<script>"));
    }

    #[test]
    fn inline_renders_code_without_a_paragraph() {
        let h = super::inline_to_html(
            "one run of `memcal fit --write-factors`, as \"From\" says; <b>x</b> & *y*",
        );
        assert_eq!(
            h,
            "one run of <code>memcal fit --write-factors</code>, as \"From\" says; &lt;b&gt;x&lt;/b&gt; &amp; <em>y</em>"
        );
        assert_eq!(
            super::inline_to_html("# not a heading\nnext"),
            "not a heading next"
        );
        assert_eq!(super::inline_to_html(""), "");
    }

    #[test]
    fn placeholders_are_the_engines_constants() {
        let h = super::prose_to_html("within {within}, {features} features");
        assert_eq!(h, "<p>within ±25%, six features</p>\n");
    }
}
