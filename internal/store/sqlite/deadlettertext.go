package sqlite

import (
	"context"
	"database/sql"
)

// migrate9 makes the word index (dead_letter_text) an FTS4 table of
// external content: it keeps its index of the words, and no copy of
// them. Before, FTS4 also stored each row's words string in a content
// table of its own (a B-tree row of up to the body's size, and a
// docsize row), only so that it could read the words back when the row
// is deleted: some 9 of the store's 55 µs of CPU per dead letter
// ingested (docs/figures.md, "Ingestion's CPU"). Now what FTS4 reads back is the
// row's body, through the view dead_letter_text_source: the simple
// tokenizer takes the same distinct words from the body as from the
// words string written (deadletter.TextWords reads words as it does),
// and a delete needs no more than which words (it removes the row's
// docid from each word's list, however often the word occurs).
//
// Except a body with a NUL byte: FTS4 reads text up to the first NUL,
// and would leave the words after it in the index under a seq that
// SQLite may give a new row (the largest seq deleted is used again),
// which would then match searches for words it lacks. Such a body's
// words are kept in dead_letter_nul_words, which the view reads in its
// place; no other row has one there.
//
// The trigger runs BEFORE the delete: FTS4 reads the row through the
// view, which must still find it. Nothing updates a row's body (a
// state change sets the state columns only), so an insert's words stay
// right for the row's life.
//
// The words already indexed move over from the old table (its content
// is the words string), the whole index built again in this step: 1 s
// for 100,000 rows of the benchmark's (docs/figures.md). The old table's
// pages go to the file's free list, for the rows to come.
func migrate9(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `
	DROP TRIGGER dead_letter_text_out;
	ALTER TABLE dead_letter_text RENAME TO dead_letter_text_old;
	CREATE TABLE dead_letter_nul_words (
		seq   INTEGER PRIMARY KEY, -- dead_letters.seq of a body with a NUL byte
		words TEXT NOT NULL        -- its words as dead_letter_text was given them
	);
	CREATE VIEW dead_letter_text_source AS
		SELECT d.seq AS rowid, coalesce(n.words, d.body) AS words
		FROM dead_letters AS d LEFT JOIN dead_letter_nul_words AS n ON n.seq = d.seq;
	CREATE VIRTUAL TABLE dead_letter_text USING fts4(words, content='dead_letter_text_source', tokenize=simple);
	CREATE TRIGGER dead_letter_text_out BEFORE DELETE ON dead_letters
	BEGIN
		DELETE FROM dead_letter_text WHERE docid = old.seq;
		DELETE FROM dead_letter_nul_words WHERE seq = old.seq;
	END;
	INSERT INTO dead_letter_nul_words (seq, words)
		SELECT o.docid, o.words FROM dead_letter_text_old AS o JOIN dead_letters AS d ON d.seq = o.docid
		WHERE instr(d.body, X'00') > 0;
	INSERT INTO dead_letter_text (docid, words) SELECT docid, words FROM dead_letter_text_old;
	DROP TABLE dead_letter_text_old;`)
	return err
}

// insertNulWords keeps the words of a body with a NUL byte (migrate9).
const insertNulWords = `INSERT INTO dead_letter_nul_words (seq, words) VALUES (?, ?)`
