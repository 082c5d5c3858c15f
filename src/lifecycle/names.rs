//! Closed sets of names (states, stages, classes) that travel as strings through the store,
//! JSON and the CLI: one macro gives each enum its canonical name, `ALL`, `Display`, `FromStr`
//! and serde as that name, so the spelling lives in exactly one place.

use std::fmt;

/// A string that is not one of the names of a closed set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct UnknownName {
    /// What kind of name was expected ("node state", "job state", …).
    pub kind: &'static str,
    pub value: String,
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} `{}` (expected one of: {})",
            self.kind,
            self.value,
            self.expected.join(", ")
        )
    }
}

/// `named_enum! { "kind", pub enum Name { Variant = "name", … } }`
macro_rules! named_enum {
    (
        $kind:literal,
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $( $(#[$vmeta])* $variant ),+ }

        impl $name {
            /// Every value, in catalog order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Every canonical name, in catalog order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The canonical name (as stored and printed).
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::lifecycle::UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::lifecycle::UnknownName {
                        kind: $kind,
                        value: s.to_owned(),
                        expected: $name::NAMES,
                    }),
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(::serde::de::Error::custom)
            }
        }
    };
}
