//! The controllers' layering, checked on the source: a controller (a folder of
//! `src/controller/`) names the runtime and the layers below it, never another
//! controller; the runtime names no controller. Test code may cross (a host test
//! plays the PreprovisioningImage builder), so it is left out.

use std::path::{Path, PathBuf};

/// The folder every controller shares.
const RUNTIME: &str = "runtime";

/// A place where one part of `src/controller/` names a controller it must not.
#[derive(Debug, PartialEq, Eq)]
struct Crossing {
    file: String,
    names: String,
}

/// Every `.rs` file under `dir`, tests (files named `tests.rs`, folders named
/// `tests`) left out.
fn production_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                files.extend(production_files(&path));
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            files.push(path);
        }
    }
    files
}

/// `source` without comments, string and char literals, and `#[cfg(test)]` items.
fn code_of(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push_str("\"\"");
            }
            // A char literal ('"', '\''); a lifetime ('a) stays.
            '\'' => {
                let mut ahead = chars.clone();
                match (ahead.next(), ahead.next()) {
                    (Some('\\'), _) => {
                        chars.next();
                        chars.next();
                        for c in chars.by_ref() {
                            if c == '\'' {
                                break;
                            }
                        }
                    }
                    (Some(_), Some('\'')) => {
                        chars.next();
                        chars.next();
                    }
                    _ => out.push(c),
                }
            }
            _ => out.push(c),
        }
    }
    without_test_items(&out)
}

/// `code` without the item after each `#[cfg(test)]` (up to its matching brace).
fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let Some(open) = after.find(['{', ';']) else {
            return out;
        };
        if after.as_bytes()[open] == b';' {
            rest = &after[open + 1..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Every path in `code` that starts with `crate`, `super` or `self`, with `use`
/// groups (`a::{b, c::d}`) spelled out, each as its segments.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut paths = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let start = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|p| code[i..].starts_with(p));
        match start {
            Some(_) if boundary => {
                let (found, end) = parse_path(code, i, Vec::new());
                paths.extend(found);
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
    }
    paths
}

/// Parses the path at `at` after `prefix`: its segments, then a `{…}` group of
/// paths or nothing. Returns the paths and where parsing stopped.
fn parse_path(code: &str, mut at: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let bytes = code.as_bytes();
    let mut segments = prefix;
    loop {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < bytes.len() && bytes[at] == b'{' {
            let mut paths = Vec::new();
            at += 1;
            loop {
                let (found, end) = parse_path(code, at, segments.clone());
                paths.extend(found);
                at = end;
                while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b',') {
                    at += 1;
                }
                if at >= bytes.len() || bytes[at] == b'}' {
                    return (paths, at + 1);
                }
            }
        }
        let start = at;
        while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
            at += 1;
        }
        if start == at {
            return (vec![segments], at);
        }
        segments.push(code[start..at].to_owned());
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            return (vec![segments], at);
        }
    }
}

/// The module path of `file` (relative to `src/`): `controller/host/mod.rs` is
/// `["controller", "host"]`.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            parts.push(stem.to_owned());
        }
    }
    parts
}

/// The controller folder (`host`, `runtime`, …) a path names, if any, as seen
/// from `module`.
fn folder_named(module: &[String], path: &[String]) -> Option<String> {
    let mut absolute: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => module.to_vec(),
        Some("super") => module.to_vec(),
        _ => return None,
    };
    let mut rest = path;
    if rest.first().map(String::as_str) == Some("crate") {
        rest = &rest[1..];
    } else {
        while let Some(first) = rest.first() {
            match first.as_str() {
                "super" => {
                    absolute.pop();
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
    }
    absolute.extend(rest.iter().cloned());
    (absolute.first().map(String::as_str) == Some("controller"))
        .then(|| absolute.get(1).cloned())
        .flatten()
}

/// The crossings in one file's `source`; `relative` is its path below `src/`.
fn crossings_in(relative: &Path, source: &str) -> Vec<Crossing> {
    let module = module_of(relative);
    let Some(own) = module.get(1).cloned() else {
        return Vec::new();
    };
    let mut found: Vec<Crossing> = paths_in(&code_of(source))
        .iter()
        .filter_map(|path| {
            let named = folder_named(&module, path)?;
            let allowed = named == own || (own != RUNTIME && named == RUNTIME);
            (!allowed).then(|| Crossing {
                file: relative.display().to_string(),
                names: path.join("::"),
            })
        })
        .collect();
    found.dedup();
    found
}

#[test]
fn no_controller_names_another_and_the_runtime_names_none() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = production_files(&src.join("controller"));
    assert!(files.len() > 40, "the controller sources were found");
    let mut crossings = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).expect("a readable source file");
        let relative = file.strip_prefix(&src).expect("below src/");
        crossings.extend(crossings_in(relative, &source));
    }
    assert!(
        crossings.is_empty(),
        "controllers import only the runtime and the layers below them \
         (docs/architecture.md, \"Layers\"); found: {crossings:#?}"
    );
}

#[test]
fn the_check_sees_crossings_through_crate_super_and_groups() {
    let kind = Path::new("controller/dataimage/store.rs");
    let code = "use crate::controller::{runtime::Next, host::Context};\n\
                use super::super::firmware::same_name;\n\
                // use crate::controller::claims::Ignored;\n\
                let s = \"crate::controller::switches\";\n\
                use crate::controller::runtime::store::StoreError;\n\
                #[cfg(test)]\nmod tests { use crate::controller::host::store::MemoryStore; }\n";
    let names: Vec<String> = crossings_in(kind, code)
        .into_iter()
        .map(|c| c.names)
        .collect();
    assert_eq!(
        names,
        [
            "crate::controller::host::Context",
            "super::super::firmware::same_name"
        ]
    );
    let runtime = Path::new("controller/runtime/turns.rs");
    let names: Vec<String> = crossings_in(runtime, "use super::super::host::capacity::Slots;")
        .into_iter()
        .map(|c| c.names)
        .collect();
    assert_eq!(names, ["super::super::host::capacity::Slots"]);
    assert!(crossings_in(runtime, "use super::store::StoreError;").is_empty());
}
