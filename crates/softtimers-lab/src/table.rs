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
/// let mut t = Table::new("source | events/s:");
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
    /// A table with the columns `header` names, separated by `|`. A name ending in `:` is
    /// right-aligned (Markdown's `---:`, for numbers; the colon is not shown), any other
    /// left-aligned (`---`, for words); an empty name leaves that header cell blank (`| |`).
    pub fn new(header: &str) -> Self {
        let mut md = String::from("|");
        let mut align = String::from("|");
        let mut columns = 0;
        for name in header.split('|').map(str::trim) {
            columns += 1;
            let (name, right) = match name.strip_suffix(':') {
                Some(name) => (name.trim_end(), true),
                None => (name, false),
            };
            // A blank header cell is `| |`, as the paper-comparison tables write it.
            if name.is_empty() {
                md += " |";
            } else {
                let _ = write!(md, " {name} |");
            }
            align += if right { " ---: |" } else { " --- |" };
        }
        md += "\n";
        md += &align;
        md.push('\n');
        Table { md, columns }
    }

    /// Appends a row, each cell between single spaces (an empty one leaves two). There must
    /// be a cell for every column (a row with more or fewer panics: a table cut wrong would be
    /// read wrong).
    pub fn row(&mut self, cells: &[&dyn Display]) {
        assert_eq!(cells.len(), self.columns, "a cell for every column");
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

/// A table under construction from rows of one type: each column is added with its header,
/// read as [`Table::new`] reads a column's name (a trailing `:` right-aligns it), beside how
/// it shows a row, so that a table's header cannot drift from its cells.
///
/// ```
/// use softtimers_lab::table::Table;
///
/// struct Run {
///     source: &'static str,
///     rate: f64,
/// }
///
/// let runs = [Run { source: "soft", rate: 2.0 }];
/// let table = Table::of(&runs)
///     .text("source", |r| r.source)
///     .fixed("rate:", 1, |r| r.rate)
///     .table();
/// assert_eq!(table.to_string(), "| source | rate |\n| --- | ---: |\n| soft | 2.0 |\n");
/// ```
pub struct Columns<'a, R> {
    rows: Vec<&'a R>,
    headers: Vec<&'a str>,
    cells: Vec<Box<dyn Fn(&'a R) -> String + 'a>>,
}

impl<'a, R> Columns<'a, R> {
    /// A column showing `value(row)` as it displays.
    pub fn text<D: Display>(mut self, header: &'a str, value: impl Fn(&'a R) -> D + 'a) -> Self {
        self.headers.push(header);
        self.cells.push(Box::new(move |r| value(r).to_string()));
        self
    }

    /// A column showing the number `value(row)` with `decimals` digits after the point.
    pub fn fixed(
        mut self,
        header: &'a str,
        decimals: usize,
        value: impl Fn(&'a R) -> f64 + 'a,
    ) -> Self {
        self.headers.push(header);
        self.cells
            .push(Box::new(move |r| format!("{:.decimals$}", value(r))));
        self
    }

    /// The table: the header, then a row for each row.
    pub fn table(self) -> Table {
        let mut table = Table::new(&self.headers.join(" | "));
        for row in self.rows {
            let cells: Vec<String> = self.cells.iter().map(|cell| cell(row)).collect();
            let shown: Vec<&dyn Display> = cells.iter().map(|c| c as &dyn Display).collect();
            table.row(&shown);
        }
        table
    }
}

impl Table {
    /// A table of `rows`, its columns added to the [`Columns`] this returns.
    pub fn of<'a, R>(rows: impl IntoIterator<Item = &'a R>) -> Columns<'a, R> {
        Columns {
            rows: rows.into_iter().collect(),
            headers: Vec::new(),
            cells: Vec::new(),
        }
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
        let mut t = Table::new(": | b");
        t.row(&[&1, &"x y"]);
        assert_eq!(t.finish(), "| | b |\n| ---: | --- |\n| 1 | x y |\n");
    }

    #[test]
    fn only_a_trailing_colon_aligns() {
        let t = Table::new("paper: socket | ours: record :");
        assert_eq!(
            t.finish(),
            "| paper: socket | ours: record |\n| --- | ---: |\n"
        );
    }
}
