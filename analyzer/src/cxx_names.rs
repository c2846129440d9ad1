//! C++ function names as reports show them: without their parameter lists and trailing
//! qualifiers unless `--full-names` (`c10::cuda::CUDACachingAllocator::Native::
//! DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)` reads
//! `c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc`). Template
//! arguments stay: they often say which instance it is. Names that are not C++ (C
//! functions, Python's qualified names) have no parameter list and are unchanged.

use std::sync::atomic::{AtomicBool, Ordering};

static FULL: AtomicBool = AtomicBool::new(false);

/// `--full-names`: keep parameter lists.
pub fn set_full(full: bool) {
    FULL.store(full, Ordering::Relaxed);
}

/// `name` as reports show it (see the module comment).
pub fn shown(name: String) -> String {
    if FULL.load(Ordering::Relaxed) {
        return name;
    }
    match params_start(&name) {
        Some(at) if at > 0 => name[..at].to_string(),
        _ => name,
    }
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
            b'<' if !name[..i].ends_with("operator") && !name[..i].ends_with("operator<") => {
                angle += 1
            }
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
}
