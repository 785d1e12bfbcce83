//! Compact JSON exactly as serde_json writes it, for the typed manifests.
//!
//! serde_json checks every byte of every string, keys included, for a character to
//! escape, one at a time; that was a fifth of a render. Nearly every string of a
//! manifest needs no escape, and [`super::hash`]'s eight-bytes-at-a-time check finds
//! that out faster; anything it flags, and every number, is written by serde_json
//! itself, so the bytes stay serde_json's. The render tests compare this writer's
//! output with [`super::hash::canonical_json`] for every kind.

use serde::ser::{self, Impossible, Serialize};
use serde_json::Error;

use super::hash::write_str;

/// Write `value` as compact JSON to `out`.
pub fn write_json(value: &(impl Serialize + ?Sized), out: &mut Vec<u8>) -> Result<(), Error> {
    value.serialize(&mut Writer { out })
}

/// serde_json's marker for a `RawValue`: a struct of this name whose one field is
/// the raw JSON text (how [`super::manifest::Constant`]s serialise).
const RAW_VALUE: &str = "$serde_json::private::RawValue";

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    fn by_serde_json(&mut self, value: &impl Serialize) -> Result<(), Error> {
        serde_json::to_writer(&mut *self.out, value)
    }

    fn open<'w>(&'w mut self, bracket: u8) -> Compound<'w, 'a> {
        self.out.push(bracket);
        Compound {
            writer: self,
            first: true,
            raw: false,
        }
    }

    /// `{"variant":` before an externally tagged enum variant's content.
    fn open_variant(&mut self, variant: &str) {
        self.out.push(b'{');
        write_str(variant, self.out);
        self.out.push(b':');
    }
}

/// An array or object being written; `raw` is a `RawValue` being copied.
struct Compound<'w, 'a> {
    writer: &'w mut Writer<'a>,
    first: bool,
    raw: bool,
}

impl Compound<'_, '_> {
    fn separate(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.writer.out.push(b',');
        }
    }

    fn element(&mut self, value: &(impl Serialize + ?Sized)) -> Result<(), Error> {
        self.separate();
        value.serialize(&mut *self.writer)
    }

    fn field(&mut self, key: &str, value: &(impl Serialize + ?Sized)) -> Result<(), Error> {
        if self.raw {
            return value.serialize(RawText(self.writer.out));
        }
        self.separate();
        write_str(key, self.writer.out);
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }

    /// A `RawValue` was copied whole: it has no brackets of its own to close.
    fn close(self, brackets: &[u8]) -> Result<(), Error> {
        if !self.raw {
            self.writer.out.extend_from_slice(brackets);
        }
        Ok(())
    }
}

macro_rules! by_serde_json {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, v: $ty) -> Result<(), Error> {
            self.by_serde_json(&v)
        })*
    };
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Compound<'w, 'a>;
    type SerializeStruct = Compound<'w, 'a>;
    type SerializeStructVariant = Compound<'w, 'a>;

    by_serde_json! {
        serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
        serialize_i64(i64), serialize_i128(i128), serialize_u8(u8), serialize_u16(u16),
        serialize_u32(u32), serialize_u64(u64), serialize_u128(u128), serialize_f32(f32),
        serialize_f64(f64), serialize_bytes(&[u8]),
    }

    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(v, self.out);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.open_variant(variant);
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(self.open(b'['))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.open_variant(variant);
        Ok(self.open(b'['))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(self.open(b'{'))
    }

    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'w, 'a>, Error> {
        if name == RAW_VALUE {
            return Ok(Compound {
                writer: self,
                first: true,
                raw: true,
            });
        }
        Ok(self.open(b'{'))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.open_variant(variant);
        Ok(self.open(b'{'))
    }
}

/// The sequence-like compounds: elements, then the closing bracket(s).
macro_rules! sequence {
    ($($trait:ident::$method:ident => $close:literal),* $(,)?) => {
        $(impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                self.close($close)
            }
        })*
    };
}

sequence! {
    SerializeSeq::serialize_element => b"]",
    SerializeTuple::serialize_element => b"]",
    SerializeTupleStruct::serialize_field => b"]",
    SerializeTupleVariant::serialize_field => b"]}",
}

/// The struct-like compounds: named fields, then the closing brace(s).
macro_rules! structure {
    ($($trait:ident => $close:literal),* $(,)?) => {
        $(impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Error> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), Error> {
                self.close($close)
            }
        })*
    };
}

structure! {
    SerializeStruct => b"}",
    SerializeStructVariant => b"}}",
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    /// JSON keys are strings; the manifests' maps are keyed by `&str`.
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.separate();
        let at = self.writer.out.len();
        key.serialize(&mut *self.writer)?;
        match self.writer.out.get(at) {
            Some(b'"') => Ok(()),
            _ => Err(ser::Error::custom("a map key that is not a string")),
        }
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        self.close(b"}")
    }
}

/// The text of a `RawValue`, copied as it is: it is JSON already.
struct RawText<'a>(&'a mut Vec<u8>);

fn not_raw_text<T>() -> Result<T, Error> {
    Err(ser::Error::custom("a RawValue holds its JSON as a string"))
}

macro_rules! not_raw_text {
    ($($method:ident($($arg:ty),*) -> $ok:ty),* $(,)?) => {
        $(fn $method(self, $(_: $arg),*) -> Result<$ok, Error> {
            not_raw_text()
        })*
    };
}

impl ser::Serializer for RawText<'_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Impossible<(), Error>;
    type SerializeTuple = Impossible<(), Error>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Impossible<(), Error>;
    type SerializeStruct = Impossible<(), Error>;
    type SerializeStructVariant = Impossible<(), Error>;

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.0.extend_from_slice(v.as_bytes());
        Ok(())
    }

    not_raw_text! {
        serialize_bool(bool) -> (), serialize_i8(i8) -> (), serialize_i16(i16) -> (),
        serialize_i32(i32) -> (), serialize_i64(i64) -> (), serialize_u8(u8) -> (),
        serialize_u16(u16) -> (), serialize_u32(u32) -> (), serialize_u64(u64) -> (),
        serialize_f32(f32) -> (), serialize_f64(f64) -> (), serialize_char(char) -> (),
        serialize_bytes(&[u8]) -> (), serialize_none() -> (), serialize_unit() -> (),
        serialize_unit_struct(&'static str) -> (),
        serialize_unit_variant(&'static str, u32, &'static str) -> (),
        serialize_seq(Option<usize>) -> Self::SerializeSeq,
        serialize_tuple(usize) -> Self::SerializeTuple,
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct,
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant,
        serialize_map(Option<usize>) -> Self::SerializeMap,
        serialize_struct(&'static str, usize) -> Self::SerializeStruct,
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant,
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Error> {
        not_raw_text()
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<(), Error> {
        not_raw_text()
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Error> {
        not_raw_text()
    }
}
