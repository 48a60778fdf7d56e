//! Markdown tables. The lab's tables are written through [`Table`], so that the pipes, the
//! alignment row and the number of cells in a row are got right in one place rather than in
//! a format string per table.

use std::fmt::{self, Display, Write as _};

/// A Markdown table: the header row and its alignment row, then one row per [`Table::row`].
/// It displays as its Markdown, every row ending in a newline.
///
/// ```
/// use softtimers_lab::table::Table;
///
/// let mut t = Table::new("lr", "source | events/s");
/// t.row(&[&"soft", &format!("{:.1}", 2.0)]);
/// t.row(&[&"none", &""]);
/// assert_eq!(
///     t.to_string(),
///     "| source | events/s |\n| --- | ---: |\n| soft | 2.0 |\n| none |  |\n"
/// );
/// ```
#[derive(Clone, Debug)]
pub struct Table {
    md: String,
    columns: usize,
}

impl Table {
    /// A table whose columns are named by `header`, the names separated by `|` (an empty
    /// name leaves that header cell blank, `| |`), and placed by `align`, a letter a column:
    /// `l` for Markdown's `---` (left, for words), `r` for `---:` (right, for numbers).
    ///
    /// # Panics
    ///
    /// Where `align` does not give one `l` or `r` for every name: a table's layout is
    /// written in the code, so this is a mistake in it.
    pub fn new(align: &str, header: &str) -> Self {
        let names: Vec<&str> = header.split('|').map(str::trim).collect();
        assert_eq!(align.len(), names.len(), "an alignment for every column");
        let mut md = String::from("|");
        for name in &names {
            // A blank header cell is `| |`, as the paper-comparison tables write it.
            if name.is_empty() {
                md += " |";
            } else {
                let _ = write!(md, " {name} |");
            }
        }
        md += "\n|";
        for a in align.chars() {
            md += match a {
                'l' => " --- |",
                'r' => " ---: |",
                _ => panic!("a column is aligned `l` or `r`, not `{a}`"),
            };
        }
        md.push('\n');
        Table {
            md,
            columns: names.len(),
        }
    }

    /// Appends a row, each cell between single spaces (an empty one leaves two). There must
    /// be a cell for every column (checked in debug builds).
    pub fn row(&mut self, cells: &[&dyn Display]) {
        debug_assert_eq!(cells.len(), self.columns, "a cell for every column");
        self.md.push('|');
        for cell in cells {
            let _ = write!(self.md, " {cell} |");
        }
        self.md.push('\n');
    }

    /// The table's Markdown.
    pub fn finish(self) -> String {
        self.md
    }
}

impl Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.md)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blank_header_cell_and_a_right_aligned_first_column() {
        let mut t = Table::new("rl", " | b");
        t.row(&[&1, &"x y"]);
        assert_eq!(t.finish(), "| | b |\n| ---: | --- |\n| 1 | x y |\n");
    }

    #[test]
    #[should_panic(expected = "an alignment for every column")]
    fn an_alignment_for_every_column() {
        let _ = Table::new("l", "a | b");
    }
}
