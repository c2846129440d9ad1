//! A checker for the part of JSON Schema (draft 2020-12) that docs/schemas uses: `type`,
//! `required`, `properties`, `additionalProperties`, `items`, `$ref` to `#/$defs/...`,
//! `const`, `enum`, `minimum`, `minLength`, `maxLength`, `anyOf`. Any other keyword fails the check,
//! so a schema can never ask for more than is checked. Shared by the analyzer's tests and
//! the end-to-end tests (`#[path]`).

use std::path::PathBuf;

use serde_json::Value;

/// `docs/schemas/<name>.schema.json`, parsed (both test crates sit one level below the
/// repository root).
pub fn load(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/schemas")
        .join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every schema file's name (without `.schema.json`).
#[allow(dead_code)] // not every test crate that includes this file lists them
pub fn names() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/schemas");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".schema.json").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// Panics with every violation if `value` does not match schema `name`.
pub fn assert_valid(name: &str, value: &Value) {
    let schema = load(name);
    let mut errors = Vec::new();
    check(&schema, &schema, value, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "{name}.schema.json rejects the output:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

const KNOWN: &[&str] = &[
    "$schema",
    "$id",
    "$defs",
    "title",
    "description",
    "type",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "$ref",
    "const",
    "enum",
    "minimum",
    "minLength",
    "maxLength",
    "anyOf",
];

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        other => panic!("unknown type {other:?} in a schema"),
    }
}

fn check(root: &Value, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        panic!("a schema at {at} is not an object: {schema}");
    };
    for key in s.keys() {
        assert!(
            KNOWN.contains(&key.as_str()),
            "unsupported keyword {key:?} at {at}"
        );
    }
    if let Some(any) = s.get("anyOf").and_then(|a| a.as_array()) {
        // Valid against at least one: the errors of the closest miss otherwise.
        let mut best: Option<Vec<String>> = None;
        for sub in any {
            let mut errs = Vec::new();
            check(root, sub, v, at, &mut errs);
            if errs.is_empty() {
                best = None;
                break;
            }
            if best.as_ref().is_none_or(|b| errs.len() < b.len()) {
                best = Some(errs);
            }
        }
        if let Some(errs) = best {
            errors.extend(errs);
        }
    }
    if let Some(r) = s.get("$ref").and_then(|r| r.as_str()) {
        let name = r
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("unsupported $ref {r:?}"));
        let target = &root["$defs"][name];
        assert!(!target.is_null(), "$ref {r:?} at {at} names no definition");
        check(root, target, v, at, errors);
    }
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_matches(t, v),
            Value::Array(ts) => ts.iter().any(|t| type_matches(t.as_str().unwrap_or(""), v)),
            _ => panic!("bad type at {at}"),
        };
        if !ok {
            errors.push(format!("{at}: {v} is not of type {t}"));
            return;
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            errors.push(format!("{at}: {v} is not {c}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(|e| e.as_array()) {
        if !e.contains(v) {
            errors.push(format!(
                "{at}: {v} is not one of {}",
                Value::Array(e.clone())
            ));
        }
    }
    if let (Some(min), Some(n)) = (s.get("minimum").and_then(|m| m.as_f64()), v.as_f64()) {
        if n < min {
            errors.push(format!("{at}: {v} is below {min}"));
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        if s.get("minLength")
            .and_then(|m| m.as_u64())
            .is_some_and(|m| len < m)
        {
            errors.push(format!("{at}: {v:?} is too short"));
        }
        if s.get("maxLength")
            .and_then(|m| m.as_u64())
            .is_some_and(|m| len > m)
        {
            errors.push(format!("{at}: {v:?} is too long"));
        }
    }
    if let (Some(items), Some(a)) = (s.get("items"), v.as_array()) {
        for (i, x) in a.iter().enumerate() {
            check(root, items, x, &format!("{at}[{i}]"), errors);
        }
    }
    if let Some(o) = v.as_object() {
        if let Some(req) = s.get("required").and_then(|r| r.as_array()) {
            for k in req.iter().filter_map(|k| k.as_str()) {
                if !o.contains_key(k) {
                    errors.push(format!("{at}: missing field {k:?}"));
                }
            }
        }
        let props = s.get("properties").and_then(|p| p.as_object());
        for (k, x) in o {
            let path = format!("{at}.{k}");
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(p), _) => check(root, p, x, &path, errors),
                (None, Some(Value::Bool(false))) => {
                    errors.push(format!("{path}: a field the schema does not document"))
                }
                (None, Some(extra @ Value::Object(_))) => check(root, extra, x, &path, errors),
                (None, _) => {}
            }
        }
    }
}
