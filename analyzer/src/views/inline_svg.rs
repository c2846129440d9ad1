//! An SVG made fit to sit inside the HTML report: no scripts, styles, event handlers or
//! links out (the page opens offline and runs nothing), and ids prefixed so that several
//! SVGs on one page do not collide.

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, Writer};

/// An SVG document made fit for inlining into the page (see the module comment): ids
/// are prefixed with `prefix` (and `url(#id)` references with them); elements whose id is
/// in `drop_ids` (inferno's search and zoom controls, which need its script) are left out.
pub fn inline_svg(svg: &str, prefix: &str, drop_ids: &[&str]) -> Result<String, String> {
    let mut reader = Reader::from_str(svg);
    let mut writer = Writer::new(Vec::with_capacity(svg.len()));
    // Depth inside an element being left out (0: none).
    let mut skipping = 0usize;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("reading an SVG to inline: {e}"))?;
        if skipping > 0 {
            match event {
                Event::Start(_) => skipping += 1,
                Event::End(_) => skipping -= 1,
                Event::Eof => break,
                _ => {}
            }
            continue;
        }
        let out = match event {
            Event::Eof => break,
            Event::Decl(_) | Event::DocType(_) | Event::Comment(_) | Event::PI(_) => continue,
            Event::Start(e) | Event::Empty(e)
                if matches!(e.name().as_ref(), b"script" | b"style")
                    || id_of(&e).is_some_and(|id| drop_ids.contains(&id.as_str())) =>
            {
                // An empty element has nothing inside to skip.
                if !is_empty_event(svg, &reader) {
                    skipping = 1;
                }
                continue;
            }
            Event::Start(e) => Event::Start(rewrite(&e, prefix)),
            Event::Empty(e) => Event::Empty(rewrite(&e, prefix)),
            other => other,
        };
        writer
            .write_event(out)
            .map_err(|e| format!("inlining an SVG: {e}"))?;
    }
    let out =
        String::from_utf8(writer.into_inner()).map_err(|e| format!("inlining an SVG: {e}"))?;
    Ok(out.trim().to_string())
}

/// Whether the event just read was a self-closing tag (`<x/>`).
fn is_empty_event(svg: &str, reader: &Reader<&[u8]>) -> bool {
    let end = reader.buffer_position() as usize;
    svg.as_bytes()[..end.min(svg.len())].ends_with(b"/>")
}

fn id_of(e: &BytesStart) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == b"id")
        .map(|a| String::from_utf8_lossy(&a.value).into_owned())
}

fn rewrite(e: &BytesStart, prefix: &str) -> BytesStart<'static> {
    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
    let mut out = BytesStart::new(name);
    for a in e.attributes().flatten() {
        let key = a.key.as_ref();
        // Namespace declarations (the HTML parser knows SVG) and inferno's `onload`
        // (its script is left out) go.
        if key == b"xmlns" || key.starts_with(b"xmlns:") || key == b"onload" {
            continue;
        }
        let value = String::from_utf8_lossy(&a.value).into_owned();
        let value = match key {
            b"id" => format!("{prefix}{value}"),
            _ if value.contains("url(#") => value.replace("url(#", &format!("url(#{prefix}")),
            _ => value,
        };
        out.push_attribute((key, value.as_bytes()));
    }
    out.into_owned()
}

#[cfg(test)]
mod tests {
    use super::inline_svg;

    #[test]
    fn inlining_strips_what_a_page_must_not_carry_and_prefixes_ids() {
        let svg = r##"<?xml version="1.0" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<svg version="1.1" width="10" height="10" onload="init(evt)" xmlns="http://www.w3.org/2000/svg" xmlns:fg="http://github.com/jonhoo/inferno"><!--See https://example.com-->
<defs><linearGradient id="background"><stop offset="5%"/></linearGradient></defs>
<style type="text/css">text { font-size:12px }</style><script type="text/ecmascript"><![CDATA[var a = "https://x";]]></script>
<rect fill="url(#background)" width="1"/><text id="search">Search</text><text id="title">A &amp; B</text><g><title>f (1 bytes)</title></g></svg>"##;
        let out = inline_svg(svg, "fg1-", &["search"]).unwrap();
        assert!(!out.contains("http"), "{out}");
        assert!(!out.contains("script") && !out.contains("<style") && !out.contains("onload"));
        assert!(!out.contains("Search"));
        assert!(
            out.contains(r#"<linearGradient id="fg1-background">"#),
            "{out}"
        );
        assert!(out.contains(r#"fill="url(#fg1-background)""#));
        assert!(
            out.contains(r#"<text id="fg1-title">A &amp; B</text>"#),
            "{out}"
        );
        assert!(out.contains("<title>f (1 bytes)</title>"));
        assert!(
            out.starts_with("<svg version=\"1.1\" width=\"10\" height=\"10\">"),
            "{out}"
        );
    }
}
