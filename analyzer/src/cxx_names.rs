//! C++ function names as reports show them: without their parameter lists and trailing
//! qualifiers unless `--full-names` (`c10::cuda::CUDACachingAllocator::Native::
//! DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)` reads
//! `c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc`), and at most
//! `MAX_NAME` characters: template arguments stay where the name fits (they often say which
//! instance it is), else they read `<…>` (PyTorch's dispatcher wrappers are over 1,000
//! characters: `c10::impl::wrap_kernel_functor_unboxed_<…>::call`); a name still too long
//! keeps its start and its last component. Names that are not C++ (C functions, Python's
//! qualified names) have no parameter list and are unchanged.

use std::sync::atomic::{AtomicBool, Ordering};

static FULL: AtomicBool = AtomicBool::new(false);

/// `--full-names`: keep parameter lists.
pub fn set_full(full: bool) {
    FULL.store(full, Ordering::Relaxed);
}

/// The longest name reports show without `--full-names`, in characters.
pub const MAX_NAME: usize = 120;

/// `name` as reports show it (see the module comment).
pub fn shown(name: String) -> String {
    if FULL.load(Ordering::Relaxed) {
        return name;
    }
    let name = match params_start(&name) {
        Some(at) if at > 0 => name[..at].to_string(),
        _ => name,
    };
    if name.chars().count() <= MAX_NAME {
        return name;
    }
    let elided = elide_templates(&name);
    if elided.chars().count() <= MAX_NAME {
        return elided;
    }
    // Keep the last component whole (the function), and as much of the start as fits.
    let last = match elided.rfind("::") {
        Some(at) if elided.len() - at < MAX_NAME / 2 => &elided[at..],
        _ => "",
    };
    let room = MAX_NAME - 1 - last.chars().count();
    let start: String = elided.chars().take(room).collect();
    format!("{start}…{last}")
}

/// `name` split before its last `keep` components (at `::` outside template arguments and
/// parentheses): (`c10::cuda::CUDACachingAllocator::Native`, `DeviceCachingAllocator::malloc`)
/// for 2; `None` when it has no more than `keep`.
pub fn split_last(name: &str, keep: usize) -> Option<(&str, &str)> {
    let b = name.as_bytes();
    let mut depth = 0usize;
    let mut cuts = Vec::new();
    let mut i = 0;
    while i + 1 < b.len() {
        match b[i] {
            b'<' if !is_operator(&name[..i]) => depth += 1,
            b'(' => depth += 1,
            b'>' | b')' if depth > 0 && !name[..i].ends_with("operator-") => depth -= 1,
            b':' if depth == 0 && b[i + 1] == b':' => {
                cuts.push(i);
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    let at = *cuts.get(cuts.len().checked_sub(keep)?)?;
    Some((&name[..at], &name[at + 2..]))
}

/// `name` with every outermost template argument list read as `<…>`.
fn elide_templates(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for (i, c) in name.char_indices() {
        match c {
            '<' if !is_operator(&name[..i]) => {
                if depth == 0 {
                    out.push_str("<…");
                }
                depth += 1;
            }
            '>' if depth > 0 && !name[..i].ends_with("operator-") => {
                depth -= 1;
                if depth == 0 {
                    out.push('>');
                }
            }
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Whether a `<` after `before` is part of `operator<` or `operator<<`, not a bracket.
fn is_operator(before: &str) -> bool {
    before.ends_with("operator") || before.ends_with("operator<")
}

/// Where the parameter list of a demangled C++ name starts: the first `(` outside
/// template arguments that is not `(anonymous namespace)` or the `()` of `operator()`.
fn params_start(name: &str) -> Option<usize> {
    let b = name.as_bytes();
    let mut angle = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // `operator<` and `operator<<` are names, not template brackets.
            b'<' if !is_operator(&name[..i]) => angle += 1,
            b'>' if angle > 0 && !name[..i].ends_with("operator-") => angle -= 1,
            b'(' if angle == 0 => {
                let rest = &name[i..];
                if rest.starts_with("(anonymous namespace)") {
                    i += "(anonymous namespace)".len();
                    continue;
                }
                if name[..i].ends_with("operator") && rest.starts_with("()") {
                    i += 2;
                    continue;
                }
                return Some(i);
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_components_split_off_outside_templates_and_parentheses() {
        let n = "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc";
        assert_eq!(
            split_last(n, 2),
            Some((
                "c10::cuda::CUDACachingAllocator::Native",
                "DeviceCachingAllocator::malloc"
            ))
        );
        assert_eq!(
            split_last("at::(anonymous namespace)::Thing<std::vector<int>>::run", 2),
            Some(("at::(anonymous namespace)", "Thing<std::vector<int>>::run"))
        );
        assert_eq!(split_last("Class::method", 2), None);
        assert_eq!(split_last("main", 2), None);
    }

    fn short(n: &str) -> String {
        match params_start(n) {
            Some(at) if at > 0 => n[..at].to_string(),
            _ => n.to_string(),
        }
    }

    #[test]
    fn parameter_lists_and_qualifiers_go_templates_stay() {
        assert_eq!(
            short("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)"),
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"
        );
        assert_eq!(
            short("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_found_block(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::AllocParams const&, unsigned long, std::shared_ptr<c10::GatheredContext>, bool)"),
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_found_block"
        );
        assert_eq!(
            short("(anonymous namespace)::Helper::run(int) const"),
            "(anonymous namespace)::Helper::run"
        );
        assert_eq!(
            short("std::vector<std::pair<int, int>, std::allocator<std::pair<int, int> > >::push_back(std::pair<int, int>&&)"),
            "std::vector<std::pair<int, int>, std::allocator<std::pair<int, int> > >::push_back"
        );
        assert_eq!(short("Foo::operator()(int) const"), "Foo::operator()");
        assert_eq!(short("operator<<(std::ostream&, Foo const&)"), "operator<<");
        assert_eq!(short("Foo::operator->() const"), "Foo::operator->");
        assert_eq!(short("keep_activations"), "keep_activations");
        assert_eq!(short("Model.forward"), "Model.forward");
        assert_eq!(short("<lambda>"), "<lambda>");
    }

    #[test]
    fn long_names_lose_their_template_arguments_first() {
        // PyTorch's dispatcher wrapper, as the symbolizer demangles it (1,100 characters).
        let args = "c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>";
        let wrapper = format!(
            "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor ({args}), &at::(anonymous namespace)::randn>, at::Tensor, c10::guts::typelist::typelist<{args}> >, at::Tensor ({args})>::call(c10::OperatorKernel*, c10::DispatchKeySet, {args})"
        );
        assert_eq!(
            shown(wrapper),
            "c10::impl::wrap_kernel_functor_unboxed_<…>::call"
        );
        // Short enough: templates stay.
        let vector =
            "std::vector<std::pair<int, int>, std::allocator<std::pair<int, int> > >::push_back";
        assert_eq!(shown(vector.to_string()), vector);
        // Too long even without them: the start and the function.
        let deep = format!("{}::run", "namespace_number_one::".repeat(8));
        let got = shown(deep);
        assert_eq!(got.chars().count(), MAX_NAME);
        assert!(
            got.starts_with("namespace_number_one::namespace_number_one::"),
            "{got}"
        );
        assert!(got.ends_with("…::run"), "{got}");
        assert_eq!(elide_templates("a<b<c>>::operator<<"), "a<…>::operator<<");
        assert_eq!(
            elide_templates("f<x>::operator-><y>"),
            "f<…>::operator-><…>"
        );
    }
}
