//! The language, end to end: parse, evaluate, render, errors.

use serde_json::json;

use super::*;

fn cond(text: &str) -> Condition {
    Condition::parse(text).unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
}

/// Evaluates `text` against a status and a body, parsing the body as JSON when it is JSON.
fn check(text: &str, status: u16, body: &str) -> bool {
    let json = serde_json::from_str::<Value>(body).ok();
    cond(text).eval(&Answer {
        status,
        body,
        json: json.as_ref(),
    })
}

fn err(text: &str) -> String {
    match Condition::parse(text) {
        Ok(c) => panic!("{text:?} should not parse, got {c}"),
        Err(e) => e.to_string(),
    }
}

/// The seed's examples, verbatim: `res` is the callback's JSON answer.
#[test]
fn the_seeds_examples_mean_what_the_seed_means() {
    let a = "{res.code} != 200 && {res.data.status} != 2";
    assert!(
        check(a, 200, r#"{"code": 500, "data": {"status": 1}}"#),
        "an HTTP 200 saying it failed: retry"
    );
    assert!(!check(a, 200, r#"{"code": 200, "data": {"status": 1}}"#));
    assert!(!check(a, 200, r#"{"code": 500, "data": {"status": 2}}"#));
    assert!(
        check(a, 200, r#"{"ok": true}"#),
        "missing paths are null: null != 200 and null != 2"
    );

    let b = "{res.code} == 200 || {res.data.msg} == 'fail'";
    assert!(check(b, 200, r#"{"code": 200, "data": {"msg": "ok"}}"#));
    assert!(check(b, 200, r#"{"code": 500, "data": {"msg": "fail"}}"#));
    assert!(!check(b, 200, r#"{"code": 500, "data": {"msg": "ok"}}"#));
    assert!(!check(b, 200, "not json"), "the HTTP status is not {{res.code}}");

    // The one the issue tried as a new user: an HTTP 200 answer {"code":500,"data":{"status":1}} retries.
    let c = "{res.code} != 200 || {res.data.status} == 2";
    assert!(check(c, 200, r#"{"code": 500, "data": {"status": 1}}"#));
    assert!(!check(c, 200, r#"{"code": 200, "data": {"status": 1}}"#));
    assert!(check(c, 200, r#"{"code": 200, "data": {"status": 2}}"#));

    // The HTTP status and raw body have names of their own.
    assert!(check("{http.status} == 202 && {http.body} == 'queued'", 202, "queued"));
    assert!(
        check("{res} == 'x'", 200, r#""x""#),
        "{{res}} alone is the whole answer"
    );
}

/// A condition stored with the meaning dq gave it before (`{res.code}` the status, `{res.data…}` the
/// answer) renders as the same condition in today's terms.
#[test]
fn legacy_conditions_are_rewritten_to_the_same_meaning() {
    let cases = [
        (
            "{res.code} != 200 && {res.data.status} != 2",
            "{http.status} != 200 && {res.status} != 2",
        ),
        (
            "{res.body} == 'ok' || {res.data} == null",
            "{http.body} == 'ok' || {res} == null",
        ),
        ("{res.data.code} >= 500", "{res.code} >= 500"),
    ];
    for (old, new) in cases {
        let legacy = Condition::parse_legacy(old).unwrap();
        assert_eq!(legacy.to_string(), new);
        assert_eq!(cond(new), legacy);
        for (status, body) in [
            (200, r#"{"status": 2, "code": 503}"#),
            (500, "ok"),
            (200, r#"{"status": 1}"#),
        ] {
            let json = serde_json::from_str::<Value>(body).ok();
            let answer = Answer {
                status,
                body,
                json: json.as_ref(),
            };
            assert_eq!(
                legacy.eval(&answer),
                cond(new).eval(&answer),
                "{old} on {status} {body}"
            );
        }
    }
    assert!(Condition::parse_legacy("{res.headers} == 1").is_err());
}

#[test]
fn today_s_fields_evaluate() {
    let a = "{http.status} != 200 && {res.status} != 2";
    assert!(!check(a, 200, r#"{"status": 2, "msg": "ok"}"#));
    assert!(!check(a, 200, r#"{"status": "2"}"#), "numeric strings count as numbers");
    assert!(!check(a, 500, r#"{"status": 2}"#), "both sides must hold");
    assert!(!check(a, 200, r#"{"status": 1}"#));
    assert!(
        check(a, 503, "<html>Service Unavailable</html>"),
        "not JSON: status is null, != 2"
    );
    assert!(check(a, 404, r#"{"error": "not found"}"#));

    let b = "{http.status} == 200 || {res.msg} == 'fail'";
    assert!(check(b, 200, r#"{"msg": "ok"}"#));
    assert!(check(b, 201, r#"{"msg": "fail"}"#));
    assert!(!check(b, 201, r#"{"msg": "ok"}"#));
    assert!(!check(b, 204, ""));
    assert!(!check(b, 500, "fail"), "res is null when the body is not JSON");

    let c = r#"({res.retry} == true || {http.status} >= 500) && {res.code} != "OK""#;
    assert!(check(c, 200, r#"{"retry": true, "code": "BUSY"}"#));
    assert!(!check(c, 200, r#"{"retry": true, "code": "OK"}"#));
    assert!(!check(c, 200, r#"{"retry": false, "code": "BUSY"}"#));
    assert!(check(c, 502, "Bad Gateway"));
    assert!(!check(c, 502, r#"{"code": "OK"}"#));
}

#[test]
fn and_binds_tighter_than_or() {
    // a || b && c with a true, b false, c false: true only if it groups as a || (b && c).
    let text = "{http.status} == 1 || {http.status} == 2 && {http.status} == 3";
    assert!(check(text, 1, ""));
    assert!(!check(text, 2, ""));
    assert_eq!(
        cond(text),
        cond("{http.status} == 1 || ({http.status} == 2 && {http.status} == 3)")
    );
    assert_ne!(
        cond(text),
        cond("({http.status} == 1 || {http.status} == 2) && {http.status} == 3")
    );
    // Parentheses override: (a || b) && c is false when c is false.
    let grouped = "({http.status} == 1 || {http.status} == 2) && {http.status} == 3";
    assert!(!check(grouped, 1, ""));
    assert!(!check(grouped, 2, ""));
    // b && c || a
    let text = "{http.status} == 2 && {http.status} == 3 || {http.status} == 1";
    assert!(check(text, 1, ""));
    assert!(!check(text, 2, ""));
    // Chains group either way to the same condition; redundant parentheses vanish.
    let x = "{http.status} == 1";
    assert_eq!(
        cond(&format!("({x} && {x}) && {x}")),
        cond(&format!("{x} && ({x} && {x})"))
    );
    assert_eq!(cond(&format!("(({x}))")), cond(x));
}

#[test]
fn short_circuit_values() {
    let t = "{http.status} == 200";
    let f = "{http.status} != 200";
    for (text, want) in [
        (format!("{t} && {t}"), true),
        (format!("{t} && {f}"), false),
        (format!("{f} && {t}"), false),
        (format!("{t} || {f}"), true),
        (format!("{f} || {t}"), true),
        (format!("{f} || {f}"), false),
        (format!("{f} || {f} || {f} || {t}"), true),
        (format!("{t} && {t} && {t} && {f}"), false),
    ] {
        assert_eq!(check(&text, 200, ""), want, "{text}");
    }
}

#[test]
fn operators_on_numbers() {
    let body = r#"{"n": 2, "f": 2.5, "neg": -3, "big": 1000}"#;
    for (text, want) in [
        ("{res.n} == 2", true),
        ("{res.n} == 2.0", true),
        ("{res.n} != 2", false),
        ("{res.n} != 3", true),
        ("{res.n} < 3", true),
        ("{res.n} < 2", false),
        ("{res.n} <= 2", true),
        ("{res.n} > 2", false),
        ("{res.n} >= 2", true),
        ("{res.f} > {res.n}", true),
        ("{res.neg} == -3", true),
        ("{res.neg} < -2.5", true),
        ("{res.big} == 1e3", true),
        ("{res.big} == 1E+3", true),
        ("{res.f} == 25e-1", true),
        ("{http.status} >= 500", false),
        ("{http.status} < 300", true),
        ("2 < 10", true),
    ] {
        assert_eq!(check(text, 200, body), want, "{text}");
    }
}

#[test]
fn operators_on_strings() {
    let body = r#"{"s": "abc", "e": ""}"#;
    for (text, want) in [
        ("{res.s} == 'abc'", true),
        ("{res.s} == \"abc\"", true),
        ("{res.s} == 'ABC'", false),
        ("{res.s} != 'abd'", true),
        ("{res.s} < 'abd'", true),
        ("{res.s} <= 'abc'", true),
        ("{res.s} > 'ab'", true),
        ("{res.s} >= 'b'", false),
        ("{res.e} == ''", true),
        ("{res.e} < 'a'", true),
        ("{res.s} == 0", false),
        ("{res.s} < 1", false),
        ("{res.s} > 1", false),
        ("{res.s} == true", false),
        ("{res.s} == null", false),
    ] {
        assert_eq!(check(text, 200, body), want, "{text}");
    }
}

#[test]
fn operators_on_bools_and_null() {
    let body = r#"{"t": true, "f": false, "z": null}"#;
    for (text, want) in [
        ("{res.t} == true", true),
        ("{res.t} != false", true),
        ("{res.f} == false", true),
        ("{res.t} == {res.f}", false),
        ("{res.t} == 'true'", false),
        ("{res.t} == 1", false),
        ("{res.t} > false", false),
        ("{res.t} >= true", false),
        ("{res.z} == null", true),
        ("{res.z} != null", false),
        ("{res.z} == 0", false),
        ("{res.z} == ''", false),
        ("{res.z} == false", false),
        ("{res.z} <= null", false),
        ("{res.z} < 1", false),
        ("null == null", true),
    ] {
        assert_eq!(check(text, 200, body), want, "{text}");
    }
}

#[test]
fn missing_paths_are_null() {
    let body = r#"{"a": {"b": 1}, "list": [1, 2], "s": "x"}"#;
    for (text, want) in [
        ("{res.nope} == null", true),
        ("{res.nope} != 2", true),
        ("{res.nope} == 2", false),
        ("{res.nope} < 2", false),
        ("{res.nope} >= 2", false),
        ("{res.nope.deeper} == null", true),
        ("{res.a.b.c} == null", true),
        ("{res.a.c} == null", true),
        ("{res.s.x} == null", true),
        ("{res.list.5} == null", true),
        ("{res.list.x} == null", true),
        ("{res.list.99999999999999999999999} == null", true),
        ("{res.a.b} == 1", true),
    ] {
        assert_eq!(check(text, 200, body), want, "{text}");
    }
}

#[test]
fn non_json_body() {
    let body = "Internal Server Error";
    assert!(check("{res} == null", 500, body));
    assert!(check("{res.status} == null", 500, body));
    assert!(check("{res.status} != 0", 500, body));
    assert!(!check("{res.status} == 0", 500, body));
    assert!(check("{http.body} == 'Internal Server Error'", 500, body));
    assert!(check("{http.body} > 'I'", 500, body));
    assert!(check("{http.body} == ''", 204, ""));
    // A body that is JSON but not an object.
    assert!(check("{res} == 'ok'", 200, r#""ok""#));
    assert!(check("{res} == 3", 200, "3"));
    assert!(check("{http.body} == 3", 200, "3"), "the raw body is a numeric string");
    assert!(check("{res.x} == null", 200, "3"));
    // The answer can say data is absent even for a JSON-looking body.
    let c = cond("{res.ok} == true");
    assert!(!c.eval(&Answer {
        status: 200,
        body: r#"{"ok": true}"#,
        json: None
    }));
}

#[test]
fn arrays_and_objects() {
    let body = r#"{"items": [{"id": 7, "tags": ["a", "b"]}, {"id": 8}], "obj": {"0": "zero", "k-1": 1, "a_b": 2}}"#;
    for (text, want) in [
        ("{res.items.0.id} == 7", true),
        ("{res.items.1.id} == 8", true),
        ("{res.items.0.tags.1} == 'b'", true),
        ("{res.items.2.id} == null", true),
        ("{res.obj.0} == 'zero'", true),
        ("{res.obj.k-1} == 1", true),
        ("{res.obj.a_b} == 2", true),
        // Arrays and objects: equal only to an identical value, never ordered.
        ("{res.items} == {res.items}", true),
        ("{res.items.0.tags} == {res.items.0.tags}", true),
        ("{res.items.0} == {res.items.1}", false),
        ("{res.items} != null", true),
        ("{res.items} == null", false),
        ("{res.items} == 'a'", false),
        ("{res.items} >= {res.items}", false),
        ("{res.obj} <= {res.obj}", false),
        ("{res.obj} > 0", false),
    ] {
        assert_eq!(check(text, 200, body), want, "{text}");
    }
    let top = r#"[10, 20]"#;
    assert!(check("{res.1} == 20", 200, top));
}

#[test]
fn numeric_strings() {
    let body = concat!(
        r#"{"s": "2", "f": "2.50", "neg": "-3", "exp": "1e3", "plus": "+4", "sp": " 2", "word": "two", "#,
        r#""inf": "inf", "nan": "NaN", "ten": "10", "nine": "9"}"#
    );
    for (text, want) in [
        ("{res.s} == 2", true),
        ("2 == {res.s}", true),
        ("{res.s} == 2.0", true),
        ("{res.s} != 2", false),
        ("{res.f} == 2.5", true),
        ("{res.neg} == -3", true),
        ("{res.exp} == 1000", true),
        ("{res.plus} == 4", true),
        ("{res.sp} == 2", false),
        ("{res.word} == 2", false),
        ("{res.inf} > 0", false),
        ("{res.nan} == {res.nan}", true),
        ("{res.nan} > 0", false),
        // Two strings compare as strings for ==, as numbers for ordering when both are numeric.
        ("{res.s} == '2'", true),
        ("{res.f} == '2.5'", false),
        ("{res.ten} > {res.nine}", true),
        ("{res.ten} > '9'", true),
        ("'10' < '9'", false),
        ("{res.s} < 3", true),
        ("{res.s} >= 2", true),
        // A numeric string against a non-numeric one: no order.
        ("{res.s} < 'a'", false),
        ("{res.s} > 'a'", false),
        ("{http.status} == '200'", true),
    ] {
        assert_eq!(check(text, 200, body), want, "{text}");
    }
}

#[test]
fn quotes_and_escapes() {
    let body = r#"{"q": "it's", "dq": "say \"hi\"", "bs": "a\\b", "u": "héllo ✓"}"#;
    for (text, want) in [
        (r#"{res.q} == "it's""#, true),
        (r#"{res.q} == 'it\'s'"#, true),
        (r#"{res.dq} == 'say "hi"'"#, true),
        (r#"{res.dq} == "say \"hi\"""#, true),
        (r#"{res.bs} == 'a\\b'"#, true),
        (r#"{res.bs} == "a\\b""#, true),
        (r#"{res.u} == 'héllo ✓'"#, true),
        (r#"{res.q} == 'it\"s'"#, false),
        ("'&& || ( ) {http.status}' == '&& || ( ) {http.status}'", true),
    ] {
        assert_eq!(check(text, 200, body), want, "{text}");
    }
    assert_eq!(cond(r#"{http.body} == 'it\'s'"#), cond(r#"{http.body} == "it's""#));
    assert_eq!(cond(r#"{http.body} == '\"'"#), cond(r#"{http.body} == '"'"#));
}

#[test]
fn whitespace_anywhere() {
    let tight = cond("({http.status}>=500||{res.x}!='a')&&{res.y}==-1");
    let loose = cond(" \t( {http.status}\n>=  500 ||{res.x} != 'a' )\r\n&&\t{res.y}   ==   -1 \n");
    assert_eq!(tight, loose);
    assert_eq!(
        tight.to_string(),
        "({http.status} >= 500 || {res.x} != 'a') && {res.y} == -1"
    );
}

#[test]
fn display_round_trips() {
    for (text, canonical) in [
        (
            "{http.status}!=200&&{res.status}!=2",
            "{http.status} != 200 && {res.status} != 2",
        ),
        (
            "{http.status} == 200 || {res.msg} == 'fail'",
            "{http.status} == 200 || {res.msg} == 'fail'",
        ),
        (
            r#"({res.retry} == true || {http.status} >= 500) && {res.code} != "OK""#,
            "({res.retry} == true || {http.status} >= 500) && {res.code} != 'OK'",
        ),
        (
            "{http.status} == 1 || ({http.status} == 2 && {http.status} == 3)",
            "{http.status} == 1 || {http.status} == 2 && {http.status} == 3",
        ),
        ("(({http.status} < 1))", "{http.status} < 1"),
        ("{res.a.0.b-c_d} <= -2.5", "{res.a.0.b-c_d} <= -2.5"),
        ("{res} == null", "{res} == null"),
        ("{http.body} > \"it's\"", "{http.body} > \"it's\""),
        (r#"{http.body} == 'a\\b\'c"d'"#, r#"{http.body} == 'a\\b\'c"d'"#),
        (r#"{http.body} == "\"\"'""#, r#"{http.body} == '""\''"#),
        ("1e3 == 1000.0", "1000 == 1000"),
        ("{http.status} == 1e21", "{http.status} == 1e21"),
        ("{http.status} == 0.0000001", "{http.status} == 1e-7"),
        ("{http.status} == 123.456", "{http.status} == 123.456"),
        (
            "{http.status} == 12345678901234567",
            "{http.status} == 1.2345678901234568e16",
        ),
        ("{http.status} == 0.0001", "{http.status} == 0.0001"),
        ("{http.status} == -0", "{http.status} == -0"),
        ("false != true", "false != true"),
        (
            "({http.status} == 1 || {http.status} == 2) && ({http.status} == 3 || ({http.status} == 4 && {http.status} == 5))",
            "({http.status} == 1 || {http.status} == 2) && ({http.status} == 3 || {http.status} == 4 && {http.status} == 5)",
        ),
        (
            "(({http.status} == 1 && {http.status} == 2) || {http.status} == 3) && {http.status} == 4",
            "({http.status} == 1 && {http.status} == 2 || {http.status} == 3) && {http.status} == 4",
        ),
    ] {
        let parsed = cond(text);
        let printed = parsed.to_string();
        assert_eq!(printed, canonical, "{text}");
        assert_eq!(cond(&printed), parsed, "{text}");
        assert_eq!(printed.parse::<Condition>(), Ok(parsed), "{text}");
    }
}

#[test]
fn display_of_a_long_condition_still_parses() {
    // Close to the limit without spaces: the spaced form would be longer than the limit.
    let text = vec!["{res.code}==1"; 68].join("||");
    assert!(text.len() <= MAX_LEN && text.len() > MAX_LEN - 10);
    let parsed = cond(&text);
    let printed = parsed.to_string();
    assert!(printed.len() <= MAX_LEN, "{}", printed.len());
    assert_eq!(cond(&printed), parsed);
    assert!(!printed.contains(' '));
    // Numbers take their shortest form there too.
    let text = format!("{}||{{res.code}}==1000", vec!["{res.code}==1"; 67].join("||"));
    assert_eq!(
        cond(&text).to_string(),
        format!("{}||{{res.code}}==1e3", vec!["{res.code}==1"; 67].join("||"))
    );
    // A short one keeps its spaces.
    assert_eq!(cond("{res.code}==1").to_string(), "{res.code} == 1");
}

#[test]
fn errors_with_positions() {
    for (text, want) in [
        ("", "empty condition"),
        ("   \n\t", "empty condition"),
        (
            "{res.code} == 1 &&",
            "expected a field, a value or \"(\" at 18, found end of condition",
        ),
        (
            "{res.code} == 1 && || {res.code} == 2",
            "expected a field, a value or \"(\" at 19, found \"||\"",
        ),
        (
            "&& {res.code} == 1",
            "expected a field, a value or \"(\" at 0, found \"&&\"",
        ),
        (
            "{res.code} ==",
            "expected a field or a value at 13, found end of condition",
        ),
        (
            "{res.code} == && {res.code} == 1",
            "expected a field or a value at 14, found \"&&\"",
        ),
        ("== 1", "expected a field, a value or \"(\" at 0, found \"==\""),
        ("{res.code} = 200", "unknown operator \"=\" at 11: did you mean \"==\"?"),
        (
            "{res.code} == 1 & {res.code} == 2",
            "unknown operator \"&\" at 16: did you mean \"&&\"?",
        ),
        (
            "{res.code} == 1 | {res.code} == 2",
            "unknown operator \"|\" at 16: did you mean \"||\"?",
        ),
        (
            "!({res.code} == 1)",
            "unknown operator \"!\" at 0: there is no negation; use \"!=\" or the opposite comparison",
        ),
        (
            "{res.code} == 1 and {res.code} == 2",
            "unexpected word \"and\" at 16: use \"&&\"",
        ),
        (
            "{res.data.ok} == TRUE",
            "unexpected word \"TRUE\" at 17: true, false and null are lowercase",
        ),
        (
            "{res.data.ok} == yes",
            "unexpected word \"yes\" at 17: strings need quotes ('text') and fields need braces ({res.data.x})",
        ),
        (
            "{res.code} == 1 == 2",
            "expected \"&&\", \"||\" or end of condition at 16, found \"==\"",
        ),
        ("{res.data.msg} == 'abc", "unterminated string starting at 18"),
        ("{res.data.msg} == \"abc'", "unterminated string starting at 18"),
        ("{res.data.msg} == 'abc\\'", "unterminated string starting at 18"),
        (
            "{res.data.msg} == 'a\\nb'",
            "invalid escape at 20: a backslash in a string may only be followed by \\, ' or \", found 'n'",
        ),
        (
            "({res.code} == 1",
            "expected \")\" at 16 to close the \"(\" at 0, found end of condition",
        ),
        (
            "(({res.code} == 1) && {res.code} == 2",
            "expected \")\" at 37 to close the \"(\" at 0, found end of condition",
        ),
        (
            "({res.code} == 1 {res.code}",
            "expected \"&&\", \"||\" or \")\" at 17, found {res.code}",
        ),
        ("{res.code} == 1)", "unexpected \")\" at 15"),
        ("({res.code} == 1)) && {res.code} == 2", "unexpected \")\" at 17"),
        ("()", "expected a field, a value or \"(\" at 1, found \")\""),
        ("({res.code}) == 1", "expected a comparison operator at 11, found \")\""),
        (
            "{req.code} == 1",
            "unknown field {req.code} at 0: a field is {res} or a path below it ({res.code}, {res.data.status}: the JSON answer), {http.status} or {http.body}",
        ),
        (
            "{http.status} == 1 && {http} == 2",
            "unknown field {http} at 22: a field is {res} or a path below it ({res.code}, {res.data.status}: the JSON answer), {http.status} or {http.body}",
        ),
        (
            "{http.headers.x} == 1",
            "unknown field {http.headers.x} at 0: a field is {res} or a path below it ({res.code}, {res.data.status}: the JSON answer), {http.status} or {http.body}",
        ),
        (
            "{http.status.x} == 1",
            "invalid field {http.status.x} at 0: http.status and http.body have no sub-fields",
        ),
        ("{res.data..x} == 1", "invalid field {res.data..x} at 0: empty segment"),
        ("{res.data.} == 1", "invalid field {res.data.} at 0: empty segment"),
        ("{} == 1", "invalid field {} at 0: the path is empty"),
        ("{res.code", "unterminated field path starting at 0: missing \"}\""),
        (
            "{res.code == 1",
            "invalid character ' ' at 9 in the field path starting at 0: segments are made of letters, digits, \
             \"_\" and \"-\", separated by \".\", and the path ends with \"}\"",
        ),
        (
            "{res.code} == 2x",
            "invalid number 2x at 14: numbers look like -3, 2, 2.5 or 1e3",
        ),
        (
            "{res.code} == 1.2.3",
            "invalid number 1.2.3 at 14: numbers look like -3, 2, 2.5 or 1e3",
        ),
        (
            "{res.code} == 1.",
            "invalid number 1. at 14: numbers look like -3, 2, 2.5 or 1e3",
        ),
        (
            "{res.code} == 1e",
            "invalid number 1e at 14: numbers look like -3, 2, 2.5 or 1e3",
        ),
        ("{res.code} == 1e999", "invalid number 1e999 at 14: out of range"),
        ("{res.code} == - 1", "unexpected character '-' at 14"),
        ("{res.code} == #", "unexpected character '#' at 14"),
        ("{res.code} == é", "unexpected character 'é' at 14"),
        (
            "{res.data.x}",
            "expected a comparison operator at 12, found end of condition",
        ),
        (
            "{res.data.x} && {res.code} == 1",
            "expected a comparison operator at 13, found \"&&\"",
        ),
        (
            "{res.code} == 1 || 'x'",
            "expected a comparison operator at 22, found end of condition",
        ),
        (
            "{res.code} == 1 || {res.data.ok}",
            "expected a comparison operator at 32, found end of condition",
        ),
        ("true", "expected a comparison operator at 4, found end of condition"),
        ("{res.data.a} 'x'", "expected a comparison operator at 13, found 'x'"),
    ] {
        assert_eq!(err(text), want, "{text:?}");
    }
    // The spec's own example.
    assert_eq!(
        err("{res.data.ok} && {res.code} == 1"),
        "expected a comparison operator at 14, found \"&&\""
    );
}

#[test]
fn first_error_in_the_text_wins() {
    assert_eq!(
        err("&& {res.code} == 'abc"),
        "expected a field, a value or \"(\" at 0, found \"&&\""
    );
    assert_eq!(
        err("{res.code} == 'abc' || {req.x} = 1"),
        err("{res.code} == 'abc' || {req.x} == 1")
    );
}

#[test]
fn limits() {
    // Too long.
    let leaf = "{res.code} == 1 || ";
    let long = format!("{}{{res.code}} == 1", leaf.repeat(60));
    assert!(long.len() > MAX_LEN);
    assert_eq!(
        err(&long),
        format!("condition too long: {} bytes, the limit is 1024", long.len())
    );
    assert_eq!(Condition::parse(&long).unwrap_err().position(), None);
    let spaces = format!("{{res.code}} == 1{}", " ".repeat(MAX_LEN - 15));
    assert_eq!(spaces.len(), MAX_LEN);
    assert!(Condition::parse(&spaces).is_ok());
    assert!(Condition::parse(&format!("{spaces} ")).is_err());

    // Too deep: 32 levels are fine, 33 are not.
    let nest = |n: usize| format!("{}{{res.code}} == 1{}", "(".repeat(n), ")".repeat(n));
    assert_eq!(cond(&nest(MAX_DEPTH)), cond("{res.code} == 1"));
    assert_eq!(err(&nest(MAX_DEPTH + 1)), "parentheses nested deeper than 32 at 32");
    assert_eq!(Condition::parse(&nest(MAX_DEPTH + 1)).unwrap_err().position(), Some(32));
    // Depth counts open parentheses, not how many groups there are.
    let siblings = vec![nest(20); 5].join(" && ");
    assert!(Condition::parse(&siblings).is_ok());
    // Unbalanced deep input fails on depth or on balance, never by overflowing the stack.
    assert!(Condition::parse(&"(".repeat(1000)).is_err());
    assert!(Condition::parse(&")".repeat(1000)).is_err());
}

#[test]
fn from_str_and_answer_copy() {
    let c: Condition = "{http.status} >= 500".parse().unwrap();
    let answer = Answer {
        status: 503,
        body: "",
        json: None,
    };
    let copy = answer;
    assert!(c.eval(&answer) && c.eval(&copy));
    assert!("{http.status} >".parse::<Condition>().is_err());
    let data = json!({"a": [1, {"b": "2"}]});
    let answer = Answer {
        status: 200,
        body: "",
        json: Some(&data),
    };
    assert!(cond("{res.a.1.b} == 2").eval(&answer));
}
