//! The few pgoutput messages the relay reads (protocol version 1, text values): a Relation
//! names a table's columns, an Insert carries a row of it. Begin and Commit are parsed by the
//! replication client (`pgwire-replication`); updates, deletes and truncates never come, as the
//! publication carries inserts only. Pure: bytes in, rows out.
//!
//! The wire format is PostgreSQL's "Logical Replication Message Formats" (protocol.sgml):
//! integers big-endian, strings NUL-terminated.

use std::collections::HashMap;

use onsale_eventlog::LogRow;

/// Where the `events` columns sit in a relation's tuples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventColumns {
    aggregate_type: usize,
    aggregate_id: usize,
    sequence: usize,
    event_type: usize,
    event_version: usize,
    payload: usize,
    metadata: usize,
    hash: usize,
}

/// One message of the stream, as far as the relay cares.
#[derive(Debug, PartialEq)]
pub enum Message {
    /// A relation was described: its id and, if it is the events table, where its columns are.
    Relation {
        id: u32,
        columns: Option<EventColumns>,
    },
    /// A row inserted into relation `relation`, each column's text (`None` for NULL).
    Insert {
        relation: u32,
        values: Vec<Option<String>>,
    },
    /// Anything else (type, origin, a logical message): nothing to relay.
    Other,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pgoutput: a {0} message ends early")]
    Truncated(&'static str),
    #[error("pgoutput: a string is not UTF-8")]
    NotUtf8,
    #[error("pgoutput: column {0} is sent as {1:?}, not as text")]
    NotText(usize, char),
    #[error("pgoutput: an insert into relation {0}, which was never described")]
    UnknownRelation(u32),
    #[error("pgoutput: the events table has no column {0}")]
    MissingColumn(&'static str),
    #[error("pgoutput: an events row without {0}")]
    NullColumn(&'static str),
    #[error("pgoutput: the sequence {0:?} is not a number")]
    BadSequence(String),
    #[error("pgoutput: the hash {0:?} is not 32 bytes in hex")]
    BadHash(String),
}

struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.bytes.len() < n {
            return Err(Error::Truncated(self.what));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Error> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self) -> Result<&'a str, Error> {
        let end = self
            .bytes
            .iter()
            .position(|b| *b == 0)
            .ok_or(Error::Truncated(self.what))?;
        let s = std::str::from_utf8(&self.bytes[..end]).map_err(|_| Error::NotUtf8)?;
        self.bytes = &self.bytes[end + 1..];
        Ok(s)
    }
}

/// Parses one pgoutput message (the payload of an XLogData). A Relation is reported with the
/// events columns' places when its name is `table` in `schema`.
pub fn parse(data: &[u8], schema: &str, table: &str) -> Result<Message, Error> {
    let Some((&tag, rest)) = data.split_first() else {
        return Ok(Message::Other);
    };
    match tag {
        b'R' => {
            let mut r = Reader {
                bytes: rest,
                what: "Relation",
            };
            let id = r.u32()?;
            let namespace = r.string()?;
            let name = r.string()?;
            let _replica_identity = r.u8()?;
            let n = usize::from(r.u16()?);
            let mut names = Vec::with_capacity(n);
            for _ in 0..n {
                let _flags = r.u8()?;
                names.push(r.string()?);
                let _type_oid = r.u32()?;
                let _type_modifier = r.u32()?;
            }
            let columns = (namespace == schema && name == table)
                .then(|| EventColumns::find(&names))
                .transpose()?;
            Ok(Message::Relation { id, columns })
        }
        b'I' => {
            let mut r = Reader {
                bytes: rest,
                what: "Insert",
            };
            let relation = r.u32()?;
            let _new = r.u8()?;
            let n = usize::from(r.u16()?);
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                match r.u8()? {
                    b'n' => values.push(None),
                    b't' => {
                        let len = r.u32()? as usize;
                        let text = std::str::from_utf8(r.take(len)?).map_err(|_| Error::NotUtf8)?;
                        values.push(Some(text.to_owned()));
                    }
                    kind => return Err(Error::NotText(i, char::from(kind))),
                }
            }
            Ok(Message::Insert { relation, values })
        }
        _ => Ok(Message::Other),
    }
}

impl EventColumns {
    fn find(names: &[&str]) -> Result<Self, Error> {
        let at = |name: &'static str| {
            names
                .iter()
                .position(|n| *n == name)
                .ok_or(Error::MissingColumn(name))
        };
        Ok(Self {
            aggregate_type: at("aggregate_type")?,
            aggregate_id: at("aggregate_id")?,
            sequence: at("sequence")?,
            event_type: at("event_type")?,
            event_version: at("event_version")?,
            payload: at("payload")?,
            metadata: at("metadata")?,
            hash: at("hash")?,
        })
    }

    /// The log row an insert's values make, taking the values it needs.
    pub fn row(&self, mut values: Vec<Option<String>>) -> Result<LogRow, Error> {
        let mut take = |at: usize, name: &'static str| {
            values
                .get_mut(at)
                .and_then(Option::take)
                .ok_or(Error::NullColumn(name))
        };
        let sequence = take(self.sequence, "sequence")?;
        let mut row = LogRow {
            aggregate_type: take(self.aggregate_type, "aggregate_type")?,
            aggregate_id: take(self.aggregate_id, "aggregate_id")?,
            sequence: sequence
                .parse()
                .map_err(|_| Error::BadSequence(sequence.clone()))?,
            event_type: take(self.event_type, "event_type")?,
            event_version: take(self.event_version, "event_version")?,
            payload: take(self.payload, "payload")?,
            metadata: take(self.metadata, "metadata")?,
            hash: [0; 32],
        };
        // A bytea's text form: "\\x" and its bytes in hex.
        let hash = take(self.hash, "hash")?;
        row.hash = hash
            .strip_prefix("\\x")
            .and_then(|h| hex::decode(h).ok())
            .and_then(|h| <[u8; 32]>::try_from(h).ok())
            .ok_or_else(|| Error::BadHash(hash.clone()))?;
        Ok(row)
    }
}

/// The relations described so far on one stream: each insert is read with its relation's
/// columns (PostgreSQL describes a relation before its first change on a stream, and again
/// after its definition changes).
#[derive(Debug, Default)]
pub struct Relations {
    events: HashMap<u32, EventColumns>,
    others: std::collections::HashSet<u32>,
}

impl Relations {
    /// Reads one message: a Relation is remembered, an Insert into the events table becomes
    /// its row, anything else (an insert into another table included) nothing.
    pub fn read(
        &mut self,
        data: &[u8],
        schema: &str,
        table: &str,
    ) -> Result<Option<LogRow>, Error> {
        match parse(data, schema, table)? {
            Message::Relation { id, columns } => {
                match columns {
                    Some(c) => {
                        self.others.remove(&id);
                        self.events.insert(id, c);
                    }
                    None => {
                        self.events.remove(&id);
                        self.others.insert(id);
                    }
                }
                Ok(None)
            }
            Message::Insert { relation, values } => match self.events.get(&relation) {
                Some(columns) => Ok(Some(columns.row(values)?)),
                None if self.others.contains(&relation) => Ok(None),
                None => Err(Error::UnknownRelation(relation)),
            },
            Message::Other => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation(id: u32, schema: &str, table: &str, columns: &[&str]) -> Vec<u8> {
        let mut b = vec![b'R'];
        b.extend(id.to_be_bytes());
        for s in [schema, table] {
            b.extend(s.as_bytes());
            b.push(0);
        }
        b.push(b'd');
        b.extend((columns.len() as u16).to_be_bytes());
        for c in columns {
            b.push(0);
            b.extend(c.as_bytes());
            b.push(0);
            b.extend(25u32.to_be_bytes());
            b.extend(u32::MAX.to_be_bytes());
        }
        b
    }

    fn insert(id: u32, values: &[Option<&str>]) -> Vec<u8> {
        let mut b = vec![b'I'];
        b.extend(id.to_be_bytes());
        b.push(b'N');
        b.extend((values.len() as u16).to_be_bytes());
        for v in values {
            match v {
                None => b.push(b'n'),
                Some(t) => {
                    b.push(b't');
                    b.extend((t.len() as u32).to_be_bytes());
                    b.extend(t.as_bytes());
                }
            }
        }
        b
    }

    const COLUMNS: [&str; 9] = [
        "aggregate_type",
        "aggregate_id",
        "sequence",
        "event_type",
        "event_version",
        "payload",
        "metadata",
        "xid",
        "hash",
    ];

    /// A bytea's text form: 32 bytes of 0xab.
    const HASH: &str = "\\xabababababababababababababababababababababababababababababababab";

    #[test]
    fn an_insert_into_the_events_table_becomes_its_log_row() {
        let mut relations = Relations::default();
        let described = relations
            .read(
                &relation(16_384, "public", "events", &COLUMNS),
                "public",
                "events",
            )
            .expect("a relation parses");
        assert!(described.is_none());
        let row = relations
            .read(
                &insert(
                    16_384,
                    &[
                        Some("show"),
                        Some("s1"),
                        Some("7"),
                        Some("HoldReleased"),
                        Some("1"),
                        Some(r#"{"HoldReleased":{"hold_id":"h"}}"#),
                        Some(r#"{"traceparent":"00-ab-cd-01"}"#),
                        Some("812"),
                        Some(HASH),
                    ],
                ),
                "public",
                "events",
            )
            .expect("an insert parses")
            .expect("an events row");
        assert_eq!(
            (
                row.aggregate_type.as_str(),
                row.aggregate_id.as_str(),
                row.sequence
            ),
            ("show", "s1", 7)
        );
        assert_eq!(row.event_type, "HoldReleased");
        assert_eq!(row.payload, r#"{"HoldReleased":{"hold_id":"h"}}"#);
        assert_eq!(row.metadata, r#"{"traceparent":"00-ab-cd-01"}"#);
        assert_eq!(row.hash, [0xab; 32]);
    }

    #[test]
    fn columns_are_found_by_name_in_any_order() {
        let mut reordered = COLUMNS;
        reordered.reverse();
        let mut relations = Relations::default();
        relations
            .read(
                &relation(1, "public", "events", &reordered),
                "public",
                "events",
            )
            .expect("a relation");
        let mut values: Vec<Option<&str>> = vec![
            Some("show"),
            Some("s2"),
            Some("12"),
            Some("SeatsHeld"),
            Some("1"),
            Some("{}"),
            Some("{}"),
            Some("9"),
            Some(HASH),
        ];
        values.reverse();
        let row = relations
            .read(&insert(1, &values), "public", "events")
            .expect("parses")
            .expect("a row");
        assert_eq!((row.aggregate_id.as_str(), row.sequence), ("s2", 12));
    }

    #[test]
    fn other_tables_and_messages_are_skipped_and_bad_input_is_refused() {
        let mut relations = Relations::default();
        relations
            .read(
                &relation(2, "public", "seat_map_seats", &["show_id"]),
                "public",
                "events",
            )
            .expect("another table's relation");
        assert!(relations
            .read(&insert(2, &[Some("s1")]), "public", "events")
            .expect("another table's insert")
            .is_none());
        assert!(matches!(
            relations.read(&insert(3, &[Some("x")]), "public", "events"),
            Err(Error::UnknownRelation(3))
        ));
        assert!(relations
            .read(b"Y\0\0", "public", "events")
            .expect("a type")
            .is_none());
        assert!(relations
            .read(b"", "public", "events")
            .expect("empty")
            .is_none());
        // An events table without a column the envelope needs is refused when described.
        assert!(matches!(
            relations.read(
                &relation(4, "public", "events", &["aggregate_id"]),
                "public",
                "events"
            ),
            Err(Error::MissingColumn("aggregate_type"))
        ));
        relations
            .read(
                &relation(5, "public", "events", &COLUMNS),
                "public",
                "events",
            )
            .expect("the events relation");
        let mut cut = insert(5, &[Some("show"), Some("s1")]);
        cut.truncate(cut.len() - 1);
        assert!(matches!(
            relations.read(&cut, "public", "events"),
            Err(Error::Truncated("Insert"))
        ));
        let null_payload = insert(
            5,
            &[
                Some("show"),
                Some("s1"),
                Some("1"),
                Some("E"),
                Some("1"),
                None,
                Some("{}"),
                None,
                None,
            ],
        );
        assert!(matches!(
            relations.read(&null_payload, "public", "events"),
            Err(Error::NullColumn("payload"))
        ));
        let bad_sequence = insert(
            5,
            &[
                Some("show"),
                Some("s1"),
                Some("x"),
                Some("E"),
                Some("1"),
                Some("{}"),
                Some("{}"),
                None,
                None,
            ],
        );
        assert!(matches!(
            relations.read(&bad_sequence, "public", "events"),
            Err(Error::BadSequence(_))
        ));
        // The chain's link is required, and is 32 bytes.
        for hash in [None, Some("\\xabab"), Some("abab")] {
            let values = [
                Some("show"),
                Some("s1"),
                Some("1"),
                Some("E"),
                Some("1"),
                Some("{}"),
                Some("{}"),
                None,
                hash,
            ];
            assert!(
                matches!(
                    relations.read(&insert(5, &values), "public", "events"),
                    Err(Error::NullColumn("hash") | Error::BadHash(_))
                ),
                "{hash:?}"
            );
        }
        let mut binary = insert(5, &[Some("show")]);
        binary[8] = b'b';
        assert!(matches!(
            relations.read(&binary, "public", "events"),
            Err(Error::NotText(0, 'b'))
        ));
    }
}
