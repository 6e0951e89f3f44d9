//! The subset of Python's pickle format a flight-recorder dump is made of: `dict`, `list`,
//! `tuple`, `str`, `int`, `float`, `bool` and `None`.
//!
//! Writing uses protocol 2 (every Python 3 reads it). Reading also takes what Python's own
//! `pickle.dump` writes at protocols 3 to 5 (frames, the memo, short strings), and the
//! `torch.jit._pickle.build_*list` calls with which PyTorch's C++ pickler wraps typed lists,
//! so a dump PyTorch wrote reads too. Anything else (objects, tensors) is refused with the
//! opcode and its offset. No dependency: the crate that exists (`serde-pickle`) brings serde
//! for ~300 lines whose subset we fix ourselves.
//!
//! ```
//! use phalanx_pg::flight_recorder::pickle::{decode, encode, Value};
//! let v = Value::Dict(vec![(Value::from("sizes"), Value::List(vec![Value::Int(-3)]))]);
//! assert_eq!(decode(&encode(&v)).unwrap(), v);
//! ```

/// A pickled value of the supported subset.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An `int` that fits 64 bits.
    Int(i64),
    /// A `float`.
    Float(f64),
    /// A `str` (also `bytes`, read as UTF-8 with replacement).
    Str(String),
    /// A `list`.
    List(Vec<Value>),
    /// A `tuple`.
    Tuple(Vec<Value>),
    /// A `dict`, in insertion order.
    Dict(Vec<(Value, Value)>),
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}

impl Value {
    /// The value under string key `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The integer, if this is one (`bool`s count, as in Python).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a list or tuple.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }

    /// Python's `repr` of the value, for reports (`[[16]]`, `'Float'`).
    pub fn repr(&self) -> String {
        let join = |v: &[Value]| v.iter().map(Value::repr).collect::<Vec<_>>().join(", ");
        match self {
            Value::None => "None".into(),
            Value::Bool(b) => if *b { "True" } else { "False" }.into(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Str(s) => format!("'{s}'"),
            Value::List(v) => format!("[{}]", join(v)),
            Value::Tuple(v) if v.len() == 1 => format!("({},)", v[0].repr()),
            Value::Tuple(v) => format!("({})", join(v)),
            Value::Dict(items) => {
                let kv: Vec<String> = items
                    .iter()
                    .map(|(k, v)| format!("{}: {}", k.repr(), v.repr()))
                    .collect();
                format!("{{{}}}", kv.join(", "))
            }
        }
    }
}

/// Pickles `v` (protocol 2).
pub fn encode(v: &Value) -> Vec<u8> {
    let mut out = vec![0x80, 2];
    write(&mut out, v);
    out.push(b'.');
    out
}

fn write(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::None => out.push(b'N'),
        Value::Bool(true) => out.push(0x88),
        Value::Bool(false) => out.push(0x89),
        Value::Int(i) => match i32::try_from(*i) {
            Ok(small) => {
                out.push(b'J');
                out.extend_from_slice(&small.to_le_bytes());
            }
            Err(_) => {
                // LONG1: little-endian two's complement, 8 bytes always suffice.
                out.extend_from_slice(&[0x8a, 8]);
                out.extend_from_slice(&i.to_le_bytes());
            }
        },
        Value::Float(f) => {
            out.push(b'G');
            out.extend_from_slice(&f.to_be_bytes());
        }
        Value::Str(s) => {
            out.push(b'X');
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Value::List(items) => {
            out.push(b']');
            if !items.is_empty() {
                out.push(b'(');
                items.iter().for_each(|x| write(out, x));
                out.push(b'e');
            }
        }
        Value::Tuple(items) => {
            out.push(b'(');
            items.iter().for_each(|x| write(out, x));
            out.push(b't');
        }
        Value::Dict(items) => {
            out.push(b'}');
            if !items.is_empty() {
                out.push(b'(');
                for (k, x) in items {
                    write(out, k);
                    write(out, x);
                }
                out.push(b'u');
            }
        }
    }
}

/// What the reader's stack holds: values, marks, and the names `GLOBAL` pushes.
#[derive(Debug, Clone)]
enum Item {
    Value(Value),
    Mark,
    Global(String),
}

/// Unpickles `bytes`; the error names the offset and what was there.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let mut r = Reader { bytes, pos: 0 };
    let mut stack: Vec<Item> = Vec::new();
    let mut memo: std::collections::HashMap<u32, Item> = Default::default();
    loop {
        let at = r.pos;
        let op = r.u8()?;
        match op {
            0x80 => {
                r.take(1)?;
            }
            0x95 => {
                r.take(8)?;
            }
            b'.' => {
                return match stack.pop() {
                    Some(Item::Value(v)) => Ok(v),
                    other => Err(format!("pickle ends with {other:?} on the stack")),
                }
            }
            b'(' => stack.push(Item::Mark),
            b'N' => stack.push(Item::Value(Value::None)),
            0x88 => stack.push(Item::Value(Value::Bool(true))),
            0x89 => stack.push(Item::Value(Value::Bool(false))),
            b'J' => {
                let b = r.take(4)?;
                let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                stack.push(Item::Value(Value::Int(v.into())));
            }
            b'K' => stack.push(Item::Value(Value::Int(r.u8()?.into()))),
            b'M' => {
                let b = r.take(2)?;
                stack.push(Item::Value(Value::Int(
                    u16::from_le_bytes([b[0], b[1]]).into(),
                )));
            }
            0x8a | 0x8b => {
                let n = if op == 0x8a {
                    r.u8()? as usize
                } else {
                    r.u32()? as usize
                };
                let b = r.take(n)?;
                if n > 8 {
                    return Err(format!("an int of {n} bytes at offset {at}"));
                }
                let neg = b.last().is_some_and(|x| x & 0x80 != 0);
                let mut full = [if neg { 0xff } else { 0 }; 8];
                full[..n].copy_from_slice(b);
                stack.push(Item::Value(Value::Int(i64::from_le_bytes(full))));
            }
            b'G' => {
                let b = r.take(8)?;
                let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                stack.push(Item::Value(Value::Float(v)));
            }
            b'X' | 0x8c | 0x8d | b'B' | b'C' | 0x8e => {
                let n = match op {
                    0x8c | b'C' => r.u8()? as usize,
                    0x8d | 0x8e => {
                        let b = r.take(8)?;
                        u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize
                    }
                    _ => r.u32()? as usize,
                };
                let s = String::from_utf8_lossy(r.take(n)?).into_owned();
                stack.push(Item::Value(Value::Str(s)));
            }
            b'}' => stack.push(Item::Value(Value::Dict(Vec::new()))),
            b']' => stack.push(Item::Value(Value::List(Vec::new()))),
            b')' => stack.push(Item::Value(Value::Tuple(Vec::new()))),
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let items = pop_values(&mut stack, n, at)?;
                stack.push(Item::Value(Value::Tuple(items)));
            }
            b't' | b'l' | b'd' => {
                let items = pop_to_mark(&mut stack, at)?;
                stack.push(Item::Value(match op {
                    b't' => Value::Tuple(items),
                    b'l' => Value::List(items),
                    _ => Value::Dict(pairs(items, at)?),
                }));
            }
            b'a' | b'e' => {
                let items = if op == b'a' {
                    pop_values(&mut stack, 1, at)?
                } else {
                    pop_to_mark(&mut stack, at)?
                };
                match stack.last_mut() {
                    Some(Item::Value(Value::List(l))) => l.extend(items),
                    other => return Err(format!("append to {other:?} at offset {at}")),
                }
            }
            b's' | b'u' => {
                let items = if op == b's' {
                    pop_values(&mut stack, 2, at)?
                } else {
                    pop_to_mark(&mut stack, at)?
                };
                let kv = pairs(items, at)?;
                match stack.last_mut() {
                    Some(Item::Value(Value::Dict(d))) => d.extend(kv),
                    other => return Err(format!("setitem on {other:?} at offset {at}")),
                }
            }
            b'q' | b'r' | 0x94 => {
                let key = match op {
                    b'q' => r.u8()?.into(),
                    b'r' => r.u32()?,
                    _ => memo.len() as u32,
                };
                let top = stack.last().cloned().ok_or("memoize on an empty stack")?;
                memo.insert(key, top);
            }
            b'h' | b'j' => {
                let key = if op == b'h' { r.u8()?.into() } else { r.u32()? };
                let item = memo
                    .get(&key)
                    .cloned()
                    .ok_or_else(|| format!("memo {key} unset at offset {at}"))?;
                stack.push(item);
            }
            b'c' => {
                let module = r.line()?;
                let name = r.line()?;
                stack.push(Item::Global(format!("{module}.{name}")));
            }
            b'R' => {
                // PyTorch's C++ pickler writes typed lists as `build_intlist([..])`.
                let args = pop_values(&mut stack, 1, at)?;
                let f = stack.pop();
                match (f, args.into_iter().next()) {
                    (Some(Item::Global(g)), Some(Value::Tuple(mut a)))
                        if g.starts_with("torch.jit._pickle.build_") && a.len() == 1 =>
                    {
                        stack.push(Item::Value(a.remove(0)))
                    }
                    (f, _) => return Err(format!("call of {f:?} at offset {at}: not supported")),
                }
            }
            other => {
                return Err(format!(
                    "pickle opcode 0x{other:02x} at offset {at}: not supported"
                ))
            }
        }
    }
}

fn pop_values(stack: &mut Vec<Item>, n: usize, at: usize) -> Result<Vec<Value>, String> {
    if stack.len() < n {
        return Err(format!("stack underflow at offset {at}"));
    }
    stack
        .split_off(stack.len() - n)
        .into_iter()
        .map(|i| match i {
            Item::Value(v) => Ok(v),
            other => Err(format!("{other:?} where a value belongs, at offset {at}")),
        })
        .collect()
}

fn pop_to_mark(stack: &mut Vec<Item>, at: usize) -> Result<Vec<Value>, String> {
    let mark = stack
        .iter()
        .rposition(|i| matches!(i, Item::Mark))
        .ok_or_else(|| format!("no mark at offset {at}"))?;
    let n = stack.len() - mark - 1;
    let items = pop_values(stack, n, at)?;
    stack.pop();
    Ok(items)
}

fn pairs(items: Vec<Value>, at: usize) -> Result<Vec<(Value, Value)>, String> {
    if !items.len().is_multiple_of(2) {
        return Err(format!("odd number of dict items at offset {at}"));
    }
    let mut it = items.into_iter();
    let mut out = Vec::new();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Ok(out)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("pickle truncated at offset {}", self.pos))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn line(&mut self) -> Result<String, String> {
        let rest = &self.bytes[self.pos..];
        let n = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or("unterminated line")?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind() {
        let v = Value::Dict(vec![
            (Value::from("a"), Value::Int(1 << 40)),
            (Value::from("b"), Value::Int(-5)),
            (
                Value::from("c"),
                Value::Tuple(vec![Value::from("0"), Value::from("default_pg")]),
            ),
            (
                Value::from("d"),
                Value::List(vec![Value::List(vec![Value::Int(16)])]),
            ),
            (Value::from("e"), Value::Float(1.5)),
            (Value::from("f"), Value::Bool(false)),
            (Value::from("g"), Value::None),
            (Value::from("h"), Value::List(vec![])),
            (Value::from("i"), Value::Int(i64::MIN)),
        ]);
        assert_eq!(decode(&encode(&v)).unwrap(), v);
    }

    #[test]
    fn reads_python_protocol_4_with_memo_and_frames() {
        // pickle.dumps({'k': [1, 300, 70000, -1, 2**40], 't': ('x', 'x'), 'f': 0.5,
        //               'n': None, 'b': True}, protocol=4)
        let bytes: &[u8] = b"\x80\x04\x95G\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01k\x94]\x94(K\x01M,\x01Jp\x11\x01\x00J\xff\xff\xff\xff\x8a\x06\x00\x00\x00\x00\x00\x01e\x8c\x01t\x94\x8c\x01x\x94h\x04\x86\x94\x8c\x01f\x94G?\xe0\x00\x00\x00\x00\x00\x00\x8c\x01n\x94N\x8c\x01b\x94\x88u.";
        let v = decode(bytes).unwrap();
        assert_eq!(
            v.get("k").unwrap(),
            &Value::List(vec![
                Value::Int(1),
                Value::Int(300),
                Value::Int(70000),
                Value::Int(-1),
                Value::Int(1 << 40)
            ])
        );
        assert_eq!(
            v.get("t").unwrap(),
            &Value::Tuple(vec![Value::from("x"), Value::from("x")])
        );
        assert_eq!(v.get("f"), Some(&Value::Float(0.5)));
        assert_eq!(v.get("n"), Some(&Value::None));
        assert_eq!(v.get("b"), Some(&Value::Bool(true)));
    }

    #[test]
    fn refuses_objects_and_truncation_with_the_offset() {
        let e = decode(b"\x80\x02cos\nsystem\n(X\x02\x00\x00\x00lst\x85R.").unwrap_err();
        assert!(e.contains("not supported"), "{e}");
        let e = decode(&encode(&Value::from("abc"))[..5]).unwrap_err();
        assert!(e.contains("truncated at offset"), "{e}");
    }
}
