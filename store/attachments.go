package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Attachment is a file a person attached to a message, as stored. Its
// content is stored once per owner under its SHA-256, immutable; the
// attachment names it with the name and media type it was uploaded with.
type Attachment struct {
	ID     string
	Owner  string // the principal who uploaded it
	Tenant string // the owner's tenant, as their identity said at upload
	// RunID is the conversation a message sent it in; empty until one
	// does (AttachToRun).
	RunID       string
	Name        string
	ContentType string
	Size        int64
	// SHA256 is the content's SHA-256, in hex: the store computes it.
	SHA256    string
	CreatedAt time.Time
}

// Attachments stores attachments and their contents. The content is
// keyed by (owner, SHA-256): the same file uploaded twice by one person is
// stored once, and never shared with another person. DeleteRun deletes
// the run's attachments in its transaction, and each content no
// attachment names any more with them.
type Attachments interface {
	// PutAttachment stores data, the content of a (ID, Owner, Name and
	// ContentType required; Tenant taken as it is; RunID, Size, SHA256 and
	// CreatedAt set by the store), and returns a as stored. The owner's
	// contents may hold at most quota bytes together, counted across
	// replicas, each content once: a content the owner holds already adds
	// nothing, and one that would go beyond fails with ErrLimit, and
	// nothing is stored. Empty data, or a missing field, is ErrInvalid; a
	// duplicate ID ErrConflict.
	PutAttachment(ctx context.Context, a Attachment, data []byte, quota int64) (Attachment, error)
	// GetAttachment returns the attachment or ErrNotFound.
	GetAttachment(ctx context.Context, id string) (Attachment, error)
	// AttachmentData returns the attachment and its content, or
	// ErrNotFound.
	AttachmentData(ctx context.Context, id string) (Attachment, []byte, error)
	// AttachToRun binds the owner's attachments ids to the run, in one
	// transaction, and returns them in the order of ids: each must be the
	// owner's and not sent in another run (sent in this one already is
	// fine), else ErrNotFound and none is bound.
	AttachToRun(ctx context.Context, runID, owner string, ids []string) ([]Attachment, error)
	// AttachmentBytes returns the size of the owner's contents together,
	// each counted once however many attachments name it: what
	// PutAttachment's quota bounds.
	AttachmentBytes(ctx context.Context, owner string) (int64, error)
	// DeleteUnsentAttachments deletes the attachments created before
	// before that no message sent (RunID empty), and the contents that
	// go with them, and returns how many it deleted. Those of a person
	// under a legal hold are kept.
	DeleteUnsentAttachments(ctx context.Context, before time.Time) (int, error)
}

const attachmentColumns = `id, owner, tenant, coalesce(run_id, ''), sha256, name, content_type, size, created_at`

var (
	// lockOwnerAttachments serialises an owner's uploads, so that the
	// quota is counted after every upload that held the lock before. On
	// SQLite the transaction's write lock does that.
	lockOwnerAttachments = postgresOnly(`SELECT pg_advisory_xact_lock(hashtextextended('usher.attachments.owner.' || $1, 0))`)

	// ownerAttachmentBytes counts each of the owner's contents once,
	// however many attachments name it, and only those an attachment of
	// theirs names that is unsent or in a conversation not deleted: what
	// a legal hold keeps of their deleted conversations until it is
	// lifted is not theirs to use any more, and does not fill their quota
	// (they would learn of the hold from it). $2 is a content's SHA-256,
	// of which the second column says whether it is counted.
	ownerAttachmentBytes = sql1(`
SELECT coalesce(sum(c.size), 0)::bigint, coalesce(sum(CASE WHEN c.sha256 = $2 THEN 1 ELSE 0 END), 0)::bigint
FROM attachment_contents c
WHERE c.owner = $1 AND EXISTS (
  SELECT 1 FROM attachments a LEFT JOIN runs r ON r.id = a.run_id
  WHERE a.owner = c.owner AND a.sha256 = c.sha256 AND (a.run_id IS NULL OR r.deleted_at IS NULL))`)

	// putContent stores the content, or locks it when the owner has it
	// already (the update changes nothing: a content is immutable), so
	// that a deletion of its last attachment waits for this upload.
	putContent = sql1(`
INSERT INTO attachment_contents (owner, sha256, size, data) VALUES ($1, $2, $3, $4)
ON CONFLICT (owner, sha256) DO UPDATE SET size = attachment_contents.size`)

	insertAttachment = sql1(`
INSERT INTO attachments (id, owner, tenant, run_id, sha256, name, content_type, size, created_at)
VALUES ($1, $2, $3, NULL, $4, $5, $6, $7, $8)`)

	getAttachment = sql1(`SELECT ` + attachmentColumns + ` FROM attachments WHERE id = $1`)

	attachmentData = sql1(`
SELECT c.data FROM attachments a JOIN attachment_contents c ON c.owner = a.owner AND c.sha256 = a.sha256
WHERE a.id = $1`)

	// attachToRun binds the owner's attachment $1 to the run $2 unless
	// another run has it.
	attachToRun = sql1(`
UPDATE attachments SET run_id = $2 WHERE id = $1 AND owner = $3 AND (run_id IS NULL OR run_id = $2)
RETURNING ` + attachmentColumns)

	// runContents locks the contents the run's attachments name, before
	// they are deleted: an upload of the same content waits, or is
	// waited for, and the deletion of the contents left without an
	// attachment then sees it.
	runContents = sql1(`
SELECT c.owner, c.sha256 FROM attachment_contents c
WHERE (c.owner, c.sha256) IN (SELECT owner, sha256 FROM attachments WHERE run_id = $1)
ORDER BY c.owner, c.sha256 FOR UPDATE`)

	deleteRunAttachmentRows = sql1(`DELETE FROM attachments WHERE run_id = $1`)

	// The unsent attachments are those created before $1 that no message
	// sent, of people under no legal hold.
	unsentContents = sql1(`
SELECT c.owner, c.sha256 FROM attachment_contents c
WHERE (c.owner, c.sha256) IN (SELECT owner, sha256 FROM attachments WHERE run_id IS NULL AND created_at < $1
  AND owner NOT IN (SELECT principal FROM legal_holds))
ORDER BY c.owner, c.sha256 FOR UPDATE`)

	deleteUnsentAttachmentRows = sql1(`DELETE FROM attachments WHERE run_id IS NULL AND created_at < $1
AND owner NOT IN (SELECT principal FROM legal_holds)`)

	// deleteOrphanContent deletes the content when no attachment names
	// it.
	deleteOrphanContent = sql1(`
DELETE FROM attachment_contents
WHERE owner = $1 AND sha256 = $2
  AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.owner = $1 AND a.sha256 = $2)`)
)

func scanAttachment(row rowScanner) (Attachment, error) {
	var a Attachment
	err := row.Scan(&a.ID, &a.Owner, &a.Tenant, &a.RunID, &a.SHA256, &a.Name, &a.ContentType, &a.Size, at(&a.CreatedAt))
	return a, err
}

func (c *core) PutAttachment(ctx context.Context, a Attachment, data []byte, quota int64) (Attachment, error) {
	var errs []error
	for _, f := range []struct{ name, v string }{{"attachment ID", a.ID}, {"attachment owner", a.Owner}, {"attachment name", a.Name}, {"attachment type", a.ContentType}} {
		if f.v == "" {
			errs = append(errs, errors.New(f.name+" is empty"))
		}
		errs = append(errs, checkText(f.name, f.v))
	}
	errs = append(errs, checkText("attachment tenant", a.Tenant))
	if len(data) == 0 {
		errs = append(errs, errors.New("attachment content is empty"))
	}
	if err := invalid(errs...); err != nil {
		return Attachment{}, err
	}
	sum := sha256.Sum256(data)
	a.SHA256, a.Size, a.RunID = hex.EncodeToString(sum[:]), int64(len(data)), ""
	err := c.inTx(ctx, func(tx executor) error {
		a.CreatedAt = storedTime(c.now())
		if _, err := tx.exec(ctx, lockOwnerAttachments, a.Owner); err != nil {
			return err
		}
		var used, held int64
		if err := tx.row(ctx, ownerAttachmentBytes, a.Owner, a.SHA256).Scan(&used, &held); err != nil {
			return err
		}
		if held == 0 && used+a.Size > quota {
			return fmt.Errorf("%w: the owner's attachments would hold %d bytes, over the quota of %d", ErrLimit, used+a.Size, quota)
		}
		if _, err := tx.exec(ctx, putContent, a.Owner, a.SHA256, a.Size, data); err != nil {
			return err
		}
		_, err := tx.exec(ctx, insertAttachment, a.ID, a.Owner, a.Tenant, a.SHA256, a.Name, a.ContentType, a.Size, a.CreatedAt)
		return err
	})
	if err != nil {
		return Attachment{}, c.fail(err)
	}
	return a, nil
}

func (c *core) GetAttachment(ctx context.Context, id string) (Attachment, error) {
	a, err := scanAttachment(c.reader().row(ctx, getAttachment, id))
	if err != nil {
		return Attachment{}, c.fail(err)
	}
	return a, nil
}

func (c *core) AttachmentData(ctx context.Context, id string) (Attachment, []byte, error) {
	x := c.reader()
	a, err := scanAttachment(x.row(ctx, getAttachment, id))
	if err != nil {
		return Attachment{}, nil, c.fail(err)
	}
	var data []byte
	if err := x.row(ctx, attachmentData, id).Scan(&data); err != nil {
		return Attachment{}, nil, c.fail(err)
	}
	return a, data, nil
}

func (c *core) AttachToRun(ctx context.Context, runID, owner string, ids []string) ([]Attachment, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]Attachment, 0, len(ids))
	err := c.inTx(ctx, func(tx executor) error {
		if err := checkRunExists(ctx, tx, runID); err != nil {
			return err
		}
		for _, id := range ids {
			a, err := scanAttachment(tx.row(ctx, attachToRun, id, runID, owner))
			if err != nil {
				return err
			}
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, c.fail(err)
	}
	return out, nil
}

func (c *core) AttachmentBytes(ctx context.Context, owner string) (int64, error) {
	var n int64
	var held int64
	if err := c.reader().row(ctx, ownerAttachmentBytes, owner, "").Scan(&n, &held); err != nil {
		return 0, c.fail(err)
	}
	return n, nil
}

func (c *core) DeleteUnsentAttachments(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := c.inTx(ctx, func(tx executor) error {
		var err error
		n, err = deleteAttachments(ctx, tx, unsentContents, deleteUnsentAttachmentRows, storedTime(before))
		return err
	})
	if err != nil {
		return 0, c.fail(err)
	}
	return int(n), nil
}

// deleteRunAttachments deletes the run's attachments, in tx, and the
// contents no attachment names any more.
func deleteRunAttachments(ctx context.Context, tx executor, runID string) error {
	_, err := deleteAttachments(ctx, tx, runContents, deleteRunAttachmentRows, runID)
	return err
}

// deleteAttachments deletes the attachments rows selects, in tx: it locks
// the contents they name (contents, taking arg too), deletes the rows, then
// each of those contents that no attachment names any more. It returns
// how many attachments it deleted.
func deleteAttachments(ctx context.Context, tx executor, contents, rows stmt, arg any) (int64, error) {
	type key struct{ owner, sha string }
	keys, err := queryAll(ctx, tx, contents, func(r rowScanner) (key, error) {
		var k key
		return k, r.Scan(&k.owner, &k.sha)
	}, arg)
	if err != nil {
		return 0, err
	}
	n, err := tx.exec(ctx, rows, arg)
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if _, err := tx.exec(ctx, deleteOrphanContent, k.owner, k.sha); err != nil {
			return 0, err
		}
	}
	return n, nil
}
