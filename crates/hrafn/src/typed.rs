//! Typed keys and values over the byte API (cargo feature `typed`), in the style of heed's
//! codecs and redb's `TableDefinition`: a [`Codec`] turns a type into bytes whose order is
//! the order wanted (numbers big-endian, signed numbers with the sign bit flipped), and a
//! [`TypedTree`] or [`TypedMultiTree`] names a tree together with its key and value codecs.
//!
//! ```
//! use hrafn::typed::{Serde, Str, TypedTree, U64Be};
//!
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct User {
//!     name: String,
//!     admin: bool,
//! }
//!
//! const USERS: TypedTree<U64Be, Serde<User>> = TypedTree::new("users");
//! const EMAILS: TypedTree<Str, U64Be> = TypedTree::new("emails");
//!
//! # let dir = tempfile::tempdir().unwrap();
//! let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
//! let mut wtx = env.begin_write()?;
//! USERS.open_mut(&mut wtx)?.insert(&7, &User { name: "ada".into(), admin: true })?;
//! EMAILS.open_mut(&mut wtx)?.insert("ada@example.com", &7)?;
//! wtx.commit()?;
//!
//! let rtx = env.begin_read()?;
//! let id = EMAILS.open(&rtx)?.get("ada@example.com")?.expect("present");
//! let user = USERS.open(&rtx)?.get(&id)?.expect("present");
//! assert_eq!(user, User { name: "ada".into(), admin: true });
//! # Ok::<(), hrafn::Error>(())
//! ```

use crate::btree::Range;
use crate::error::{Error, Result};
use crate::txn::{MultiTree, MultiTreeMut, ReadTxn, Tree, TreeMut, WriteTxn};
use std::borrow::Cow;
use std::marker::PhantomData;
use std::ops::Bound;

/// How a type is stored: encoded to bytes for keys or values, decoded back (borrowing from
/// the transaction where the type allows). Codecs are marker types, hence `'static`.
pub trait Codec: 'static {
    /// What [`Codec::encode`] takes.
    type Encode: ?Sized;
    /// What [`Codec::decode`] gives.
    type Decoded<'a>;

    /// The bytes of `item`.
    ///
    /// # Errors
    /// [`Error::Decode`] when the item cannot be encoded (a serde failure).
    fn encode(item: &Self::Encode) -> Result<Cow<'_, [u8]>>;

    /// The item stored as `bytes`.
    ///
    /// # Errors
    /// [`Error::Decode`] when the bytes are not an encoded item.
    fn decode(bytes: &[u8]) -> Result<Self::Decoded<'_>>;
}

fn wrong(what: &str, bytes: &[u8]) -> Error {
    Error::Decode {
        what: format!("{} bytes as {what}", bytes.len()),
    }
}

/// `u64` as 8 big-endian bytes: byte order is numeric order.
pub struct U64Be;

impl Codec for U64Be {
    type Encode = u64;
    type Decoded<'a> = u64;

    fn encode(item: &u64) -> Result<Cow<'_, [u8]>> {
        Ok(Cow::Owned(item.to_be_bytes().to_vec()))
    }

    fn decode(bytes: &[u8]) -> Result<u64> {
        Ok(u64::from_be_bytes(
            bytes.try_into().map_err(|_| wrong("a u64", bytes))?,
        ))
    }
}

/// `u32` as 4 big-endian bytes.
pub struct U32Be;

impl Codec for U32Be {
    type Encode = u32;
    type Decoded<'a> = u32;

    fn encode(item: &u32) -> Result<Cow<'_, [u8]>> {
        Ok(Cow::Owned(item.to_be_bytes().to_vec()))
    }

    fn decode(bytes: &[u8]) -> Result<u32> {
        Ok(u32::from_be_bytes(
            bytes.try_into().map_err(|_| wrong("a u32", bytes))?,
        ))
    }
}

/// `i64` as 8 big-endian bytes with the sign bit flipped: negative numbers sort first.
pub struct I64Be;

impl Codec for I64Be {
    type Encode = i64;
    type Decoded<'a> = i64;

    fn encode(item: &i64) -> Result<Cow<'_, [u8]>> {
        Ok(Cow::Owned(
            ((*item as u64) ^ (1 << 63)).to_be_bytes().to_vec(),
        ))
    }

    fn decode(bytes: &[u8]) -> Result<i64> {
        let raw = u64::from_be_bytes(bytes.try_into().map_err(|_| wrong("an i64", bytes))?);
        Ok((raw ^ (1 << 63)) as i64)
    }
}

/// UTF-8 text, decoded without a copy.
pub struct Str;

impl Codec for Str {
    type Encode = str;
    type Decoded<'a> = &'a str;

    fn encode(item: &str) -> Result<Cow<'_, [u8]>> {
        Ok(Cow::Borrowed(item.as_bytes()))
    }

    fn decode(bytes: &[u8]) -> Result<&str> {
        std::str::from_utf8(bytes).map_err(|_| wrong("UTF-8 text", bytes))
    }
}

/// Raw bytes.
pub struct Bytes;

impl Codec for Bytes {
    type Encode = [u8];
    type Decoded<'a> = &'a [u8];

    fn encode(item: &[u8]) -> Result<Cow<'_, [u8]>> {
        Ok(Cow::Borrowed(item))
    }

    fn decode(bytes: &[u8]) -> Result<&[u8]> {
        Ok(bytes)
    }
}

/// Any serde type, through bincode. For values: bincode's byte order is not the type's
/// order, so a `Serde` key orders by bytes, not by value.
pub struct Serde<T>(PhantomData<T>);

impl<T: serde::Serialize + serde::de::DeserializeOwned + 'static> Codec for Serde<T> {
    type Encode = T;
    type Decoded<'a> = T;

    fn encode(item: &T) -> Result<Cow<'_, [u8]>> {
        bincode::serialize(item)
            .map(Cow::Owned)
            .map_err(|e| Error::Decode {
                what: format!("a value that bincode cannot encode: {e}"),
            })
    }

    fn decode(bytes: &[u8]) -> Result<T> {
        bincode::deserialize(bytes).map_err(|e| Error::Decode {
            what: format!(
                "{} bytes as {}: {e}",
                bytes.len(),
                std::any::type_name::<T>()
            ),
        })
    }
}

/// The key and value codecs a handle carries (as `fn` types: a handle owns no `K` or `V`,
/// so it is `Send`, `Sync` and `Copy`-able whatever they are).
type Codecs<K, V> = PhantomData<(fn() -> K, fn() -> V)>;

/// A named B+tree with typed keys and values; `const`-constructible, so a program declares
/// its trees once.
pub struct TypedTree<K, V> {
    name: &'static str,
    codecs: Codecs<K, V>,
}

impl<K: Codec, V: Codec> TypedTree<K, V> {
    /// The tree named `name`.
    pub const fn new(name: &'static str) -> TypedTree<K, V> {
        TypedTree {
            name,
            codecs: PhantomData,
        }
    }

    /// The tree's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Opens the tree in a read transaction.
    ///
    /// # Errors
    /// As [`ReadTxn::open_tree`].
    pub fn open<'t>(&self, rtx: &'t ReadTxn<'_>) -> Result<TypedRead<'t, K, V>> {
        Ok(TypedRead {
            tree: rtx.open_tree(self.name)?,
            codecs: PhantomData,
        })
    }

    /// Opens the tree in a write transaction, creating it if needed.
    ///
    /// # Errors
    /// As [`WriteTxn::open_tree`].
    pub fn open_mut<'t, 'env>(
        &self,
        wtx: &'t mut WriteTxn<'env>,
    ) -> Result<TypedWrite<'t, 'env, K, V>> {
        Ok(TypedWrite {
            tree: wtx.open_tree(self.name)?,
            codecs: PhantomData,
        })
    }
}

/// Decodes the entries of a byte range.
fn decoded<'a, K: Codec, V: Codec>(
    entry: Result<(&'a [u8], &'a [u8])>,
) -> Result<(K::Decoded<'a>, V::Decoded<'a>)> {
    let (k, v) = entry?;
    Ok((K::decode(k)?, V::decode(v)?))
}

/// Encodes a range bound.
fn bound<K: Codec>(b: Bound<&K::Encode>) -> Result<Bound<Vec<u8>>> {
    Ok(match b {
        Bound::Included(k) => Bound::Included(K::encode(k)?.into_owned()),
        Bound::Excluded(k) => Bound::Excluded(K::encode(k)?.into_owned()),
        Bound::Unbounded => Bound::Unbounded,
    })
}

/// A typed tree in a read transaction.
pub struct TypedRead<'t, K, V> {
    tree: Tree<'t>,
    codecs: Codecs<K, V>,
}

impl<'t, K: Codec, V: Codec> TypedRead<'t, K, V> {
    /// The value of `key`.
    ///
    /// # Errors
    /// [`Error::Decode`]; corruption.
    pub fn get(&self, key: &K::Encode) -> Result<Option<V::Decoded<'t>>> {
        self.tree.get(K::encode(key)?)?.map(V::decode).transpose()
    }

    /// Entries with keys between `start` and `end`, decoded, in key (byte) order.
    ///
    /// # Errors
    /// [`Error::Decode`] for a bound; corruption met while positioning.
    pub fn range(
        &self,
        start: Bound<&K::Encode>,
        end: Bound<&K::Encode>,
    ) -> Result<impl DoubleEndedIterator<Item = Result<(K::Decoded<'t>, V::Decoded<'t>)>> + 't>
    {
        let range: Range<'t, _> = self.tree.range((bound::<K>(start)?, bound::<K>(end)?))?;
        Ok(range.map(decoded::<K, V>))
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.tree.len()
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// The byte-level tree.
    pub fn bytes(&self) -> &Tree<'t> {
        &self.tree
    }
}

/// A typed tree in a write transaction.
pub struct TypedWrite<'t, 'env, K, V> {
    tree: TreeMut<'t, 'env>,
    codecs: Codecs<K, V>,
}

impl<K: Codec, V: Codec> TypedWrite<'_, '_, K, V> {
    /// Inserts or replaces `key`. Returns true if a value was replaced.
    ///
    /// # Errors
    /// [`Error::Decode`] if a value does not encode; as [`TreeMut::insert`].
    pub fn insert(&mut self, key: &K::Encode, value: &V::Encode) -> Result<bool> {
        self.tree.insert(K::encode(key)?, V::encode(value)?)
    }

    /// Removes `key`. Returns true if it was present.
    ///
    /// # Errors
    /// As [`TreeMut::remove`].
    pub fn remove(&mut self, key: &K::Encode) -> Result<bool> {
        self.tree.remove(K::encode(key)?)
    }

    /// The value of `key`, as this transaction sees it.
    ///
    /// # Errors
    /// [`Error::Decode`]; corruption.
    pub fn get(&self, key: &K::Encode) -> Result<Option<V::Decoded<'_>>> {
        self.tree.get(K::encode(key)?)?.map(V::decode).transpose()
    }

    /// Entries with keys between `start` and `end`, decoded.
    ///
    /// # Errors
    /// [`Error::Decode`] for a bound; corruption met while positioning.
    pub fn range<'s>(
        &'s self,
        start: Bound<&K::Encode>,
        end: Bound<&K::Encode>,
    ) -> Result<impl DoubleEndedIterator<Item = Result<(K::Decoded<'s>, V::Decoded<'s>)>> + 's>
    {
        let range = self.tree.range((bound::<K>(start)?, bound::<K>(end)?))?;
        Ok(range.map(decoded::<K, V>))
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.tree.len()
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }
}

/// A named multi-value tree with typed keys and values: a key maps to a sorted set of
/// values (here a tag to the ids of the posts that carry it).
///
/// ```
/// use hrafn::typed::{Str, TypedMultiTree, U64Be};
///
/// const TAGGED: TypedMultiTree<Str, U64Be> = TypedMultiTree::new("tagged");
///
/// # let dir = tempfile::tempdir().unwrap();
/// let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
/// let mut wtx = env.begin_write()?;
/// let mut tagged = TAGGED.open_mut(&mut wtx)?;
/// for (tag, post) in [("rust", 9), ("db", 3), ("rust", 2), ("rust", 9)] {
///     tagged.add(tag, &post)?; // false for ("rust", 9) the second time: sets hold a value once
/// }
/// drop(tagged);
/// wtx.commit()?;
///
/// let rtx = env.begin_read()?;
/// let tagged = TAGGED.open(&rtx)?;
/// let posts: Vec<u64> = tagged.values("rust")?.collect::<hrafn::Result<_>>()?;
/// assert_eq!(posts, [2, 9]); // in numeric order: big-endian bytes sort as numbers
/// assert_eq!(tagged.count("db")?, 1);
/// # Ok::<(), hrafn::Error>(())
/// ```
pub struct TypedMultiTree<K, V> {
    name: &'static str,
    codecs: Codecs<K, V>,
}

impl<K: Codec, V: Codec> TypedMultiTree<K, V> {
    /// The multi-value tree named `name`.
    pub const fn new(name: &'static str) -> TypedMultiTree<K, V> {
        TypedMultiTree {
            name,
            codecs: PhantomData,
        }
    }

    /// Opens it in a read transaction.
    ///
    /// # Errors
    /// As [`ReadTxn::open_multi_tree`].
    pub fn open<'t>(&self, rtx: &'t ReadTxn<'_>) -> Result<TypedMultiRead<'t, K, V>> {
        Ok(TypedMultiRead {
            tree: rtx.open_multi_tree(self.name)?,
            codecs: PhantomData,
        })
    }

    /// Opens it in a write transaction, creating it if needed.
    ///
    /// # Errors
    /// As [`WriteTxn::open_multi_tree`].
    pub fn open_mut<'t, 'env>(
        &self,
        wtx: &'t mut WriteTxn<'env>,
    ) -> Result<TypedMultiWrite<'t, 'env, K, V>> {
        Ok(TypedMultiWrite {
            tree: wtx.open_multi_tree(self.name)?,
            codecs: PhantomData,
        })
    }
}

/// A typed multi-value tree in a read transaction.
pub struct TypedMultiRead<'t, K, V> {
    tree: MultiTree<'t>,
    codecs: Codecs<K, V>,
}

impl<'t, K: Codec, V: Codec> TypedMultiRead<'t, K, V> {
    /// Whether `value` is in `key`'s set.
    ///
    /// # Errors
    /// [`Error::Decode`]; corruption.
    pub fn contains(&self, key: &K::Encode, value: &V::Encode) -> Result<bool> {
        self.tree.contains(K::encode(key)?, V::encode(value)?)
    }

    /// The values of `key`, decoded, in byte order.
    ///
    /// # Errors
    /// [`Error::Decode`]; corruption.
    pub fn values(
        &self,
        key: &K::Encode,
    ) -> Result<impl DoubleEndedIterator<Item = Result<V::Decoded<'t>>> + 't> {
        Ok(self
            .tree
            .values(K::encode(key)?)?
            .map(|v| v.and_then(V::decode)))
    }

    /// Number of values of `key`.
    ///
    /// # Errors
    /// [`Error::Decode`]; corruption.
    pub fn count(&self, key: &K::Encode) -> Result<u64> {
        self.tree.count(K::encode(key)?)
    }
}

/// A typed multi-value tree in a write transaction.
pub struct TypedMultiWrite<'t, 'env, K, V> {
    tree: MultiTreeMut<'t, 'env>,
    codecs: Codecs<K, V>,
}

impl<K: Codec, V: Codec> TypedMultiWrite<'_, '_, K, V> {
    /// Adds `value` to `key`'s set. Returns false if it was already there.
    ///
    /// # Errors
    /// [`Error::Decode`] if a value does not encode; as [`MultiTreeMut::add`].
    pub fn add(&mut self, key: &K::Encode, value: &V::Encode) -> Result<bool> {
        self.tree.add(K::encode(key)?, V::encode(value)?)
    }

    /// Removes `value` from `key`'s set. Returns false if it was not there.
    ///
    /// # Errors
    /// As [`MultiTreeMut::remove`].
    pub fn remove(&mut self, key: &K::Encode, value: &V::Encode) -> Result<bool> {
        self.tree.remove(K::encode(key)?, V::encode(value)?)
    }

    /// Whether `value` is in `key`'s set, as this transaction sees it.
    ///
    /// # Errors
    /// [`Error::Decode`]; corruption.
    pub fn contains(&self, key: &K::Encode, value: &V::Encode) -> Result<bool> {
        self.tree.contains(K::encode(key)?, V::encode(value)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_order_as_bytes() {
        let signed = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        let bytes: Vec<Vec<u8>> = signed
            .iter()
            .map(|n| I64Be::encode(n).expect("encode").into_owned())
            .collect();
        assert!(bytes.windows(2).all(|w| w[0] < w[1]));
        for (n, b) in signed.iter().zip(&bytes) {
            assert_eq!(I64Be::decode(b).expect("decode"), *n);
        }
        let unsigned = [0u64, 1, 255, 256, u64::MAX];
        let bytes: Vec<Vec<u8>> = unsigned
            .iter()
            .map(|n| U64Be::encode(n).expect("encode").into_owned())
            .collect();
        assert!(bytes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            U32Be::decode(&U32Be::encode(&7).expect("encode")).expect("decode"),
            7
        );
    }

    #[test]
    fn bad_bytes_are_decode_errors() {
        assert!(matches!(U64Be::decode(b"short"), Err(Error::Decode { .. })));
        assert!(matches!(I64Be::decode(&[0; 9]), Err(Error::Decode { .. })));
        assert!(matches!(
            Str::decode(&[0xFF, 0xFE]),
            Err(Error::Decode { .. })
        ));
        assert!(matches!(
            Serde::<(u64, String)>::decode(&[1, 2, 3]),
            Err(Error::Decode { .. })
        ));
        assert_eq!(Str::decode("ok".as_bytes()).expect("utf-8"), "ok");
        let value = (9u64, String::from("x"));
        let bytes = Serde::<(u64, String)>::encode(&value).expect("encode");
        assert_eq!(
            Serde::<(u64, String)>::decode(&bytes).expect("decode"),
            value
        );
    }
}
