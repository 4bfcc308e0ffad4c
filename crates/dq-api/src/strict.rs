//! Nested request objects that are objects: serde's derived `Deserialize` of a struct also takes a
//! JSON array, its elements filling the fields in order (`"retry": [null, 5]`), which the API never
//! means and its OpenAPI document does not allow. `#[serde(deserialize_with = "strict::object")]` on
//! a struct-typed field (and [`objects`] on a list of them) reads only a JSON object there, with
//! serde's usual error for anything else (`invalid type: sequence, expected a map`).

use serde::Deserialize;
use serde::de::{Deserializer, Visitor};

/// A field whose struct must be written as a JSON object.
pub fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    T::deserialize(ObjectOnly(d))
}

/// An optional field whose struct, when given (and not `null`), must be written as a JSON object.
pub fn option_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<Strict<T>>::deserialize(d).map(|o| o.map(|s| s.0))
}

/// A list whose every element is a struct written as a JSON object.
pub fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Vec::<Strict<T>>::deserialize(d).map(|v| v.into_iter().map(|s| s.0).collect())
}

/// `T`, read from a JSON object only.
struct Strict<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Strict<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object(d).map(Strict)
    }
}

/// A deserializer that reads a struct as a map (which JSON arrays are not), and everything else as
/// the one it wraps does.
struct ObjectOnly<D>(D);

/// Forwards each `deserialize_*` method (its extra arguments named) to the wrapped deserializer.
macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*)),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
                self.0.$method($($arg,)* visitor)
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    forward! {
        deserialize_any(), deserialize_bool(), deserialize_i8(), deserialize_i16(), deserialize_i32(),
        deserialize_i64(), deserialize_i128(), deserialize_u8(), deserialize_u16(), deserialize_u32(),
        deserialize_u64(), deserialize_u128(), deserialize_f32(), deserialize_f64(), deserialize_char(),
        deserialize_str(), deserialize_string(), deserialize_bytes(), deserialize_byte_buf(),
        deserialize_option(), deserialize_unit(), deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str), deserialize_seq(), deserialize_tuple(len: usize),
        deserialize_tuple_struct(name: &'static str, len: usize), deserialize_map(),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]), deserialize_identifier(),
        deserialize_ignored_any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: Option<u32>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[serde(default, deserialize_with = "option_object")]
        one: Option<Inner>,
        #[serde(default, deserialize_with = "objects")]
        many: Vec<Inner>,
    }

    #[test]
    fn objects_are_read_and_arrays_refused() {
        let ok: Outer = serde_json::from_str(r#"{"one": {"a": 1}, "many": [{"a": 2}, {}]}"#).unwrap();
        assert_eq!(ok.one, Some(Inner { a: Some(1) }));
        assert_eq!(ok.many, vec![Inner { a: Some(2) }, Inner { a: None }]);
        let none: Outer = serde_json::from_str(r#"{"one": null}"#).unwrap();
        assert_eq!(none.one, None);
        for bad in [r#"{"one": [1]}"#, r#"{"many": [[2]]}"#, r#"{"one": [null]}"#] {
            let err = serde_json::from_str::<Outer>(bad).unwrap_err().to_string();
            assert!(
                err.contains("expected a map") || err.contains("expected struct"),
                "{bad}: {err}"
            );
        }
        assert!(serde_json::from_str::<Outer>(r#"{"one": {"a": 1, "b": 2}}"#).is_err());
    }
}
