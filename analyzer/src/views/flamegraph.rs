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
            frames.push("[no stack captured]".to_string());
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
    Ok(out)
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
