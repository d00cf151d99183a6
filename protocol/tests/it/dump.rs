//! Annotated hex dumps: built field by field for the golden vectors (an
//! independent, hand-written statement of each layout), rendered into
//! PROTOCOL.md and parsed back out of it.

use std::fmt::Write as _;

/// Bytes per dump line at most.
const LINE_BYTES: usize = 16;

/// A byte string with a note per line.
#[derive(Clone, Debug, Default)]
pub struct Dump {
    lines: Vec<(Vec<u8>, String)>,
}

impl Dump {
    pub fn new() -> Dump {
        Dump::default()
    }

    /// Raw bytes with a note; longer than a line, they continue on lines
    /// noted "(continued)".
    pub fn raw(&mut self, bytes: &[u8], note: impl Into<String>) -> &mut Dump {
        let mut note = Some(note.into());
        if bytes.is_empty() {
            return self;
        }
        for chunk in bytes.chunks(LINE_BYTES) {
            let n = note.take().unwrap_or_else(|| "(continued)".to_owned());
            self.lines.push((chunk.to_vec(), n));
        }
        self
    }

    pub fn u8(&mut self, v: u8, name: &str) -> &mut Dump {
        self.raw(&[v], note(name, v))
    }

    pub fn u16(&mut self, v: u16, name: &str) -> &mut Dump {
        self.raw(&v.to_le_bytes(), note(name, v))
    }

    pub fn u32(&mut self, v: u32, name: &str) -> &mut Dump {
        self.raw(&v.to_le_bytes(), note(name, v))
    }

    pub fn u64(&mut self, v: u64, name: &str) -> &mut Dump {
        self.raw(&v.to_le_bytes(), note(name, v))
    }

    /// A `u8` length and a string.
    pub fn str8(&mut self, s: &str, name: &str) -> &mut Dump {
        self.u8(u8::try_from(s.len()).unwrap(), &format!("{name} length"));
        self.raw(s.as_bytes(), format!("{name} = {s:?}"))
    }

    /// A `u16` length and a string.
    pub fn str16(&mut self, s: &str, name: &str) -> &mut Dump {
        self.u16(u16::try_from(s.len()).unwrap(), &format!("{name} length"));
        self.raw(s.as_bytes(), format!("{name} = {s:?}"))
    }

    pub fn append(&mut self, other: &Dump) -> &mut Dump {
        self.lines.extend(other.lines.iter().cloned());
        self
    }

    pub fn len(&self) -> usize {
        self.lines.iter().map(|(b, _)| b.len()).sum()
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.lines
            .iter()
            .flat_map(|(b, _)| b.iter().copied())
            .collect()
    }

    /// The dump as PROTOCOL.md shows it: `hex bytes  # note` per line, the
    /// notes aligned.
    pub fn render(&self) -> String {
        let width = self
            .lines
            .iter()
            .map(|(b, _)| 3 * b.len() - 1)
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for (bytes, note) in &self.lines {
            let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(out, "{:<width$}  # {note}", hex.join(" ")).unwrap();
        }
        out
    }
}

/// `name = value`, with a parenthesised remark in `name` moved after the
/// value: `"created (1 = new)"` gives `created = 1 (1 = new)`.
fn note(name: &str, value: impl std::fmt::Display) -> String {
    match name.split_once(" (") {
        Some((name, remark)) => format!("{name} = {value} ({remark}"),
        None => format!("{name} = {value}"),
    }
}

/// A whole frame around `payload`.
pub fn frame(opcode: u8, flags: u8, request_id: u32, payload: &Dump) -> Dump {
    let name = sluice_protocol::opcode::name(opcode).unwrap();
    let flags_note = match flags {
        0 => "flags = 0".to_owned(),
        sluice_protocol::flags::RECEIVE_BIND_LEASES => {
            format!("flags = 0x{flags:02x} (bit 0: bind the leases to the connection)")
        }
        f => format!("flags = 0x{f:02x}"),
    };
    let len = u32::try_from(payload.len() + 6).unwrap();
    let mut d = Dump::new();
    d.raw(
        &len.to_le_bytes(),
        format!("length = {len} (bytes after this field)"),
    )
    .raw(&[opcode], format!("opcode = 0x{opcode:02x} {name}"))
    .raw(&[flags], flags_note)
    .u32(request_id, "request id")
    .append(payload);
    d
}

/// A fenced ```` ```hex vector=NAME ```` block found in a markdown file.
#[derive(Debug)]
pub struct Block {
    pub name: String,
    /// Line index of the opening fence.
    pub open: usize,
    /// Line index of the closing fence.
    pub close: usize,
    pub bytes: Vec<u8>,
}

/// Every vector block in `markdown`, with the bytes its lines spell.
///
/// # Panics
/// On a malformed block: a line without a note, a token that is not two hex
/// digits, a block without its closing fence.
pub fn parse_blocks(markdown: &str) -> Vec<Block> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = lines[i].trim().strip_prefix("```hex vector=") else {
            i += 1;
            continue;
        };
        let open = i;
        let mut bytes = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim() != "```" {
            let line = lines[i].trim();
            if !line.is_empty() {
                let (hex, note) = line
                    .split_once('#')
                    .unwrap_or_else(|| panic!("vector {name}: line {} has no `# note`", i + 1));
                assert!(
                    !note.trim().is_empty(),
                    "vector {name}: line {} has an empty note",
                    i + 1
                );
                for tok in hex.split_whitespace() {
                    assert_eq!(
                        tok.len(),
                        2,
                        "vector {name}: token {tok:?} on line {}",
                        i + 1
                    );
                    bytes.push(u8::from_str_radix(tok, 16).unwrap_or_else(|_| {
                        panic!("vector {name}: {tok:?} on line {} is not hex", i + 1)
                    }));
                }
            }
            i += 1;
        }
        assert!(i < lines.len(), "vector {name}: no closing fence");
        blocks.push(Block {
            name: name.trim().to_owned(),
            open,
            close: i,
            bytes,
        });
        i += 1;
    }
    blocks
}

/// `markdown` with each named block's contents replaced by `render(name)`.
pub fn rewrite_blocks(markdown: &str, render: impl Fn(&str) -> Option<String>) -> String {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut out = String::new();
    let mut last = 0;
    for block in parse_blocks(markdown) {
        let Some(body) = render(&block.name) else {
            continue;
        };
        for line in &lines[last..=block.open] {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&body);
        last = block.close;
    }
    for line in &lines[last..] {
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[test]
fn dumps_render_and_parse_back() {
    let mut d = Dump::new();
    d.u16(0x0102, "x").raw(&[7; 20], "twenty").str8("ab", "s");
    let md = format!("text\n```hex vector=t\n{}```\nmore\n", d.render());
    let blocks = parse_blocks(&md);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].name, "t");
    assert_eq!(blocks[0].bytes, d.bytes());
    assert!(d.render().contains("(continued)"));
    let rewritten = rewrite_blocks(&md, |_| Some("00  # zero\n".to_owned()));
    assert_eq!(rewritten, "text\n```hex vector=t\n00  # zero\n```\nmore\n");
}
