//! Flamegraphs of a snapshot: folded stacks (one line per distinct stack, frames outermost
//! first separated by `;`, then the live bytes: what inferno, flamegraph.pl and speedscope
//! read) and the SVG that inferno draws from them.
//!
//! Each stack starts with a synthetic root frame naming its device and memory kind
//! (`[GPU 0 device]`), so one graph shows every device side by side. Frames are
//! `function (file:line)` where the symbols say so, else `module+0xoffset`.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use gpumemprof_format::MemKind;
use inferno::flamegraph::{self, color::BasicPalette, Direction, Options, Palette};

use crate::snapshot::Snapshot;
use crate::symbolize::{Frame, Symbolizer};
use crate::units;

/// The frame of a stack with no frames (none was captured).
pub const NO_STACK: &str = "[no stack captured]";

/// The root frame of a (device, kind): `[GPU 0 device]`, `[GPU ? managed]`.
pub fn root_label(device: i32, kind: MemKind) -> String {
    format!("[GPU {} {}]", units::device(device), kind.name())
}

/// One frame as a flamegraph box: `train_step (train.c:42)`, `libfoo.so+0x1a2b`; a C++
/// name of more than two components reads with its last two first and the namespace after
/// (`DeviceCachingAllocator::malloc in c10::cuda::CUDACachingAllocator::Native`): a box too
/// narrow for the whole label shows its start, which is then the function.
pub fn frame_label(f: &Frame) -> String {
    let mut s = frame_text(f);
    if let Some(func) = f.function.as_deref().filter(|_| !f.python) {
        if let Some((namespace, last)) = crate::cxx_names::split_last(func, 2) {
            s = format!("{last}{} in {namespace}", &s[func.len()..]);
        }
    }
    s
}

/// `frame_label` before the C++ name is reordered.
fn frame_text(f: &Frame) -> String {
    let file_name = |p: &str| {
        Path::new(p)
            .file_name()
            .and_then(|n| n.to_str())
            .map_or_else(|| p.to_string(), str::to_owned)
    };
    let place = match (&f.module, f.offset) {
        (Some(m), Some(off)) => format!("{}+{off:#x}", file_name(m)),
        _ => f.address.clone(),
    };
    let mut s = match (&f.function, &f.file, f.line) {
        (Some(func), Some(file), Some(line)) => format!("{func} ({}:{line})", file_name(file)),
        (Some(func), Some(file), None) => format!("{func} ({})", file_name(file)),
        (Some(func), None, _) => func.clone(),
        (None, Some(file), Some(line)) => format!("{place} ({}:{line})", file_name(file)),
        (None, _, _) => place,
    };
    if f.inlined {
        s.push_str(" [inlined]");
    }
    // `;` separates frames and a line ends the stack: neither may appear inside one.
    s.replace(';', ",").replace(['\n', '\r'], " ")
}

/// Folded lines of `snapshot`, identical stacks merged, sorted. `inverted`: the frames
/// under each root go innermost first (the allocating function next to the root), so
/// the widest boxes are the functions that allocate, whoever called them.
pub fn folded(snapshot: &Snapshot, sym: &mut Symbolizer, inverted: bool) -> Vec<String> {
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for site in &snapshot.sites {
        let mut frames: Vec<String> = sym.stack(site.stack, 0).iter().map(frame_label).collect();
        if frames.is_empty() {
            frames.push(NO_STACK.to_string());
        }
        if !inverted {
            frames.reverse();
        }
        let mut stack = root_label(site.device, site.kind);
        for f in frames {
            stack.push(';');
            stack.push_str(&f);
        }
        let bytes = merged.entry(stack).or_default();
        *bytes = bytes.saturating_add(site.bytes);
    }
    merged
        .into_iter()
        .map(|(stack, bytes)| format!("{stack} {bytes}"))
        .collect()
}

/// How to draw a flamegraph.
#[derive(Debug, Clone)]
pub struct Style {
    pub title: String,
    pub subtitle: Option<String>,
    /// Icicle orientation (roots at the top), for `folded(.., inverted = true)` lines.
    pub inverted: bool,
    /// inferno's script (click to zoom, search). Off for the HTML report, which must not
    /// carry a script with links in it and shows each box's numbers as a tooltip.
    pub javascript: bool,
}

/// The SVG of `lines` (from `folded`), or a one-line SVG saying there is nothing to draw.
pub fn svg(lines: &[String], style: &Style) -> io::Result<Vec<u8>> {
    if lines.is_empty() {
        return Ok(empty_svg(&style.title));
    }
    let mut opt = Options::default();
    opt.title = style.title.clone();
    opt.subtitle = style.subtitle.clone();
    opt.count_name = "bytes".to_string();
    opt.name_type = "Frame:".to_string();
    opt.colors = Palette::Basic(BasicPalette::Mem);
    // Colour by name, the same in every run: two graphs of one program are comparable.
    opt.hash = true;
    opt.deterministic = true;
    opt.direction = if style.inverted {
        Direction::Inverted
    } else {
        Direction::Straight
    };
    opt.no_javascript = !style.javascript;
    // Keep every stack, however narrow: a small leak is still a leak.
    opt.min_width = 0.0;
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut out)?;
    Ok(with_sizes(&String::from_utf8_lossy(&out)).into_bytes())
}

/// inferno's box width in characters per percent of the image: its defaults (12-pixel
/// text, 0.59 of it per character, 1200 pixels).
const CHARS_PER_PERCENT: f64 = 1.0 / 0.59;

/// `svg` with each box's size after its name where the box has room for both
/// (`main (train.c:42) · 20.0 MiB`): inferno shows the bytes only in the tooltip.
pub fn with_sizes(svg: &str) -> String {
    let mut out = String::with_capacity(svg.len() + svg.len() / 8);
    let mut rest = svg;
    while let Some(at) = rest.find("<g><title>") {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find("</g>") else { break };
        let (group, after) = rest.split_at(end);
        out.push_str(&sized(group).unwrap_or_else(|| group.to_string()));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// One `<g>` (up to its `</g>`) with the size added to its text, if it fits.
fn sized(group: &str) -> Option<String> {
    let title = group.strip_prefix("<g><title>")?.split("</title>").next()?;
    let (label, numbers) = title.rsplit_once(" (")?;
    let bytes: u64 = numbers
        .split(" bytes")
        .next()?
        .replace(',', "")
        .parse()
        .ok()?;
    let width: f64 = group
        .split("width=\"")
        .nth(1)?
        .split('%')
        .next()?
        .parse()
        .ok()?;
    let open = group
        .rfind('>')
        .filter(|_| group.ends_with("</text>"))
        .and(group.rfind("\">"))?;
    let text = group.get(open + 2..group.len() - "</text>".len())?;
    let sized = format!("{label} · {}", crate::units::bytes(bytes));
    let fits = (width * CHARS_PER_PERCENT) as usize > sized.chars().count();
    (text == label && fits).then(|| format!("{}{sized}</text>", &group[..open + 2]))
}

fn empty_svg(title: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"80\" viewBox=\"0 0 1200 80\" \
         xmlns=\"http://www.w3.org/2000/svg\">\
         <text x=\"600\" y=\"30\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"17\">{}</text>\
         <text x=\"600\" y=\"60\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"12\">\
         no GPU memory was live then</text></svg>\n",
        xml_escape(title)
    )
    .into_bytes()
}

/// Escapes text for XML and HTML content and attribute values.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: Option<&str>, file: Option<&str>, line: Option<u32>) -> Frame {
        Frame {
            address: "0x1234".into(),
            module: Some("/usr/lib/libfoo.so".into()),
            function: function.map(str::to_owned),
            file: file.map(str::to_owned),
            line,
            inlined: false,
            offset: Some(0x34),
            python: false,
            role: None,
        }
    }

    #[test]
    fn frame_labels() {
        assert_eq!(
            frame_label(&frame(Some("step"), Some("/src/train.c"), Some(42))),
            "step (train.c:42)"
        );
        assert_eq!(frame_label(&frame(Some("f"), None, None)), "f");
        // A box wide enough shows its size; a narrow one (its name cut) does not.
        let wide = "<g><title>main (a.c:3) (2,097,152 bytes, 50.00%)</title><rect x=\"0%\" \
                    width=\"50.0000%\" height=\"15\"/><text x=\"0.25%\" y=\"1\">main (a.c:3)</text></g>";
        assert_eq!(
            with_sizes(wide),
            wide.replace(">main (a.c:3)</text>", ">main (a.c:3) · 2.0 MiB</text>")
        );
        let narrow = wide
            .replace("50.0000%", "9.0000%")
            .replace(">main (a.c:3)</text>", ">main..</text>");
        assert_eq!(with_sizes(&narrow), narrow);
        // A long C++ name: the box shows the function first.
        assert_eq!(
            frame_label(&frame(
                Some("c10::cuda::Alloc::Native::Device::malloc"),
                Some("/s/a.cpp"),
                Some(3)
            )),
            "Device::malloc (a.cpp:3) in c10::cuda::Alloc::Native"
        );
        assert_eq!(frame_label(&frame(None, None, None)), "libfoo.so+0x34");
        assert_eq!(
            frame_label(&frame(Some("operator;\nx"), None, None)),
            "operator, x"
        );
        assert_eq!(root_label(-1, MemKind::Managed), "[GPU ? managed]");
    }

    #[test]
    fn an_empty_snapshot_draws_a_message() {
        let svg = svg(
            &[],
            &Style {
                title: "Live <GPU> memory".into(),
                subtitle: None,
                inverted: false,
                javascript: true,
            },
        )
        .unwrap();
        let text = String::from_utf8(svg).unwrap();
        assert!(text.contains("Live &lt;GPU&gt; memory"));
    }
}
