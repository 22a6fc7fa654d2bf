//! Prose: Markdown under `data/prose/`, rendered with pulldown-cmark. [`to_html`] is the one
//! function that sets pulldown-cmark's options. Raw HTML in prose is escaped, not passed
//! through, so prose cannot inject markup or script. Prose carries no numbers: every number
//! on a page comes from the view model through a template.

use pulldown_cmark::{html, Event, Options, Parser};

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

#[cfg(test)]
mod tests {
    #[test]
    fn raw_html_is_text() {
        let h = super::to_html("Hello *there* <script>alert(1)</script>");
        assert!(h.contains("<em>there</em>"));
        assert!(h.contains("&lt;script&gt;"));
        assert!(!h.contains("<script>"));
    }
}
