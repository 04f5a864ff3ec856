package assistant

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/internal/identity"
	"github.com/usherhq/usher/store"
)

// Defaults of the attachment options.
const (
	DefaultAttachmentMaxBytes   = 10 << 20
	DefaultAttachmentQuotaBytes = 1 << 30
	// MaxAttachmentsPerMessage bounds the attachments one message sends.
	MaxAttachmentsPerMessage = 10
	// unsentAttachmentTTL is how long an attachment no message sent is
	// kept: the sweep deletes it after.
	unsentAttachmentTTL = 24 * time.Hour
	// modelAttachmentBytes bounds the attachment content one model
	// request carries; older attachments beyond it are sent as
	// placeholders.
	modelAttachmentBytes = 32 << 20
)

// attachmentsPath is the upload route; a download is attachmentsPath/{id}.
const attachmentsPath = "/api/assistant/attachments"

// attachmentStore is the part of the store that keeps attachments.
type attachmentStore interface {
	PutAttachment(ctx context.Context, a store.Attachment, data []byte, quota int64) (store.Attachment, error)
	GetAttachment(ctx context.Context, id string) (store.Attachment, error)
	AttachmentData(ctx context.Context, id string) (store.Attachment, []byte, error)
	AttachToRun(ctx context.Context, runID, owner string, ids []string) ([]store.Attachment, error)
	DeleteUnsentAttachments(ctx context.Context, before time.Time) (int, error)
}

// AttachmentRef is an attachment as a message references it (in its
// message.user payload) and as the API shows it.
type AttachmentRef struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func refOf(a store.Attachment) AttachmentRef {
	return AttachmentRef{ID: a.ID, Name: a.Name, Type: a.ContentType, Size: a.Size, SHA256: a.SHA256}
}

var (
	errAttachmentTooLarge = httpx.Errorf(http.StatusRequestEntityTooLarge, "attachment_too_large",
		"The file is larger than this server accepts.")
	errAttachmentQuota = httpx.Errorf(http.StatusConflict, "attachment_quota_exceeded",
		"Your attachments have reached their storage quota: delete conversations with attachments to make room.")
	errAttachmentNotFound = httpx.Errorf(http.StatusNotFound, "not_found", "No such attachment.")
	errAttachmentRefs     = httpx.Errorf(http.StatusBadRequest, "invalid_attachments",
		fmt.Sprintf("attachments must list at most %d distinct ids of files you uploaded and have not sent in another conversation.", MaxAttachmentsPerMessage))
	errMultipart = httpx.Errorf(http.StatusBadRequest, "invalid_upload",
		`Send the file as the body (its name in ?name=), or as multipart/form-data with one part named "file".`)
)

// uploadLimit bounds an upload's body: the largest attachment, and room
// for a multipart envelope.
func (rt *Runtime) uploadLimit() int64 { return rt.o.AttachmentMaxBytes + 64<<10 }

// isUpload reports a request to the upload route.
func isUpload(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == attachmentsPath
}

// withUploadLimit serves the upload route with a body limit of its own
// (uploadLimit) and every other route through limited.
func (rt *Runtime) withUploadLimit(limited, mux http.Handler) http.Handler {
	limit := rt.uploadLimit()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isUpload(r) {
			limited.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > limit {
			rt.fail(w, r, errAttachmentTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		mux.ServeHTTP(w, r)
	})
}

// ReadUploads is the server's reading of request bodies with uploads in
// mind: an upload (POST /api/assistant/attachments) goes to next with its
// body read within timeout and bounded by the largest attachment rather
// than the server's body limit, which others (next behind that limit)
// applies to every other request.
func (rt *Runtime) ReadUploads(timeout time.Duration, next, others http.Handler) http.Handler {
	uploads := httpx.ReadBodyFor(rt.uploadLimit(), timeout, func(w http.ResponseWriter, r *http.Request, e *httpx.Error) {
		if e == httpx.ErrBodyTooLarge {
			e = errAttachmentTooLarge
		}
		httpx.WriteError(w, r, rt.log, e)
	}, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isUpload(r) {
			uploads.ServeHTTP(w, r)
			return
		}
		others.ServeHTTP(w, r)
	})
}

// handleUpload stores an attachment: the body is the file (its name in
// ?name=, its type in Content-Type), or a multipart form whose part "file"
// is. It answers 201 with the AttachmentRef.
func (rt *Runtime) handleUpload(w http.ResponseWriter, r *http.Request) {
	p, ok := identity.FromContext(r.Context())
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	name, declared, data, err := rt.readUpload(r)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	typ, err := classify(name, declared, data)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	data = stripMetadata(typ, data)
	a, err := rt.st.PutAttachment(r.Context(), store.Attachment{
		ID: newAttachmentID(), Owner: p.ID(), Tenant: p.Tenant, Name: name, ContentType: typ,
	}, data, rt.o.AttachmentQuotaBytes)
	if errors.Is(err, store.ErrLimit) {
		err = errAttachmentQuota
	}
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	w.Header().Set("Location", attachmentsPath+"/"+a.ID)
	httpx.WriteJSON(w, http.StatusCreated, refOf(a))
}

// readUpload reads the upload's name, declared type and content.
func (rt *Runtime) readUpload(r *http.Request) (name, declared string, data []byte, _ error) {
	ct := r.Header.Get("Content-Type")
	body := io.Reader(r.Body)
	if mt, params, err := mime.ParseMediaType(ct); err == nil && mt == "multipart/form-data" {
		part, err := multipart.NewReader(r.Body, params["boundary"]).NextPart()
		if err != nil || part.FormName() != "file" {
			return "", "", nil, errMultipart
		}
		name, declared, body = part.FileName(), part.Header.Get("Content-Type"), part
		// FileName keeps only the last element of a path: the raw name
		// is what is checked, so that a path is refused, not cut.
		if _, dp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition")); err == nil {
			name = dp["filename"]
		}
	} else {
		name, declared = r.URL.Query().Get("name"), ct
	}
	data, err := io.ReadAll(io.LimitReader(body, rt.o.AttachmentMaxBytes+1))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge), int64(len(data)) > rt.o.AttachmentMaxBytes:
		return "", "", nil, errAttachmentTooLarge
	case err != nil:
		return "", "", nil, httpx.Errorf(http.StatusBadRequest, "invalid_body", "The request body could not be read.")
	}
	return name, declared, data, nil
}

// handleDownload answers an attachment's content to who may read it: its
// uploader while no message sent it, the owner of the run it was sent in
// after. Anyone else, like a missing attachment, gets 404.
func (rt *Runtime) handleDownload(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	a, data, err := rt.st.AttachmentData(r.Context(), r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) || (err == nil && a.Owner != owner) {
		err = errAttachmentNotFound
	}
	if err == nil && a.RunID != "" {
		if _, err = rt.Run(r.Context(), owner, a.RunID); errors.Is(err, errRunNotFound) {
			err = errAttachmentNotFound
		}
	}
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	h := w.Header()
	typ, disposition := a.ContentType, "attachment"
	if strings.HasPrefix(typ, "image/") {
		disposition = "inline"
	} else {
		// Text is served as text, whatever it holds: never as HTML.
		typ += "; charset=utf-8"
	}
	h.Set("Content-Type", typ)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Set("Content-Disposition", disposition+"; filename*=UTF-8''"+url.PathEscape(a.Name))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	// The content never changes: it is addressed by its hash.
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	h.Set("ETag", `"`+a.SHA256+`"`)
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(data)
	}
}

// attachToRun binds the attachments ids, the owner's, to the run, and
// returns their references for the message that sends them.
func (rt *Runtime) attachToRun(ctx context.Context, runID, owner string, ids []string) ([]AttachmentRef, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if err := checkAttachmentIDs(ids); err != nil {
		return nil, err
	}
	as, err := rt.st.AttachToRun(ctx, runID, owner, ids)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errAttachmentRefs
	}
	if err != nil {
		return nil, err
	}
	refs := make([]AttachmentRef, len(as))
	for i, a := range as {
		refs[i] = refOf(a)
	}
	return refs, nil
}

// sweepAttachments deletes the attachments no message sent within
// unsentAttachmentTTL.
func (rt *Runtime) sweepAttachments(ctx context.Context) {
	if n, err := rt.st.DeleteUnsentAttachments(ctx, rt.o.Now().Add(-unsentAttachmentTTL)); err != nil {
		rt.log.Error("assistant: deleting unsent attachments failed", "err", err)
	} else if n > 0 {
		rt.log.Info("assistant: deleted unsent attachments", "count", n)
	}
}

// attachmentURI names an attachment in a model part until its content is
// loaded (withAttachments).
const attachmentURI = "usher-attachment:"

// attachmentParts are the model parts of a message's attachments: an image
// part for an image, a file part for a text file; their content is loaded
// for each request (withAttachments), never kept in the log.
func attachmentParts(refs []AttachmentRef) []model.Part {
	if len(refs) == 0 {
		return nil
	}
	parts := make([]model.Part, len(refs))
	for i, a := range refs {
		kind := "file"
		if strings.HasPrefix(a.Type, "image/") {
			kind = "image"
		}
		parts[i] = model.Part{Kind: kind, MIMEType: a.Type, Name: a.Name, Size: a.Size, URI: attachmentURI + a.ID}
	}
	return parts
}

// withAttachments returns msgs with the content of their attachments'
// parts loaded, newest first, up to modelAttachmentBytes in all: the
// older ones beyond go as they are, without content (a provider gets a
// placeholder). msgs itself is not modified. An attachment that is gone
// (its run deleted meanwhile) goes without content too.
func (rt *Runtime) withAttachments(ctx context.Context, msgs []model.Message) ([]model.Message, error) {
	out := slices.Clone(msgs)
	budget := int64(modelAttachmentBytes)
	for i := len(out) - 1; i >= 0; i-- {
		if !slices.ContainsFunc(out[i].Parts, isAttachmentPart) {
			continue
		}
		parts := slices.Clone(out[i].Parts)
		for j, p := range parts {
			if !isAttachmentPart(p) {
				continue
			}
			id := strings.TrimPrefix(p.URI, attachmentURI)
			p.URI = ""
			if p.Size <= budget {
				_, data, err := rt.st.AttachmentData(ctx, id)
				switch {
				case err == nil:
					p.Data, budget = data, budget-int64(len(data))
				case !errors.Is(err, store.ErrNotFound):
					return nil, err
				}
			}
			parts[j] = p
		}
		out[i].Parts = parts
	}
	return out, nil
}

func isAttachmentPart(p model.Part) bool { return strings.HasPrefix(p.URI, attachmentURI) }

// newAttachmentID returns a random attachment id.
func newAttachmentID() string {
	return "att_" + strings.ReplaceAll(uuid.Must(uuid.NewRandomFromReader(rand.Reader)).String(), "-", "")
}

// attachmentNames is a message's preview when it has no text: the names
// of the files it sends.
func attachmentNames(refs []AttachmentRef) string {
	names := make([]string, len(refs))
	for i, a := range refs {
		names[i] = a.Name
	}
	return strings.Join(names, ", ")
}

// imagePartBytes is what an image part counts for in the context
// estimate: about the 1,000 tokens a model's image encoder makes of a
// typical picture, whatever its file's size.
const imagePartBytes = 1000 * bytesPerToken

// partBytes is what a part counts for in the context estimate: an image
// imagePartBytes, a text file its size (its text goes in the message),
// any other part the placeholder line it becomes.
func partBytes(p model.Part) int64 {
	switch p.Kind {
	case "image":
		return imagePartBytes
	case "file":
		return p.Size
	}
	return 64
}

// openingAttachments checks the attachments ids a run's opening message
// sends and returns their references: each must be the owner's, and not
// sent yet — unless by a run this creation opened before (a retry with
// the same idempotency key).
func (rt *Runtime) openingAttachments(ctx context.Context, owner, key string, ids []string) ([]AttachmentRef, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if err := checkAttachmentIDs(ids); err != nil {
		return nil, err
	}
	refs := make([]AttachmentRef, len(ids))
	for i, id := range ids {
		a, err := rt.st.GetAttachment(ctx, id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && a.Owner != owner) {
			return nil, errAttachmentRefs
		}
		if err != nil {
			return nil, err
		}
		if a.RunID != "" {
			r, err := rt.st.GetRun(ctx, a.RunID)
			if err != nil || key == "" || r.Owner != owner || r.IdempotencyKey != key {
				return nil, errAttachmentRefs
			}
		}
		refs[i] = refOf(a)
	}
	return refs, nil
}

// bindOpening binds the attachments of a run's opening message, stored
// already, to the run. Should another run have taken one meanwhile, the
// message keeps its reference, still the owner's alone: this is logged.
func (rt *Runtime) bindOpening(ctx context.Context, runID, owner string, ids []string) {
	if len(ids) == 0 {
		return
	}
	if _, err := rt.st.AttachToRun(ctx, runID, owner, ids); err != nil {
		rt.log.Warn("assistant: binding the attachments of a run's opening message failed", "run", runID, "err", err)
	}
}

// checkAttachmentIDs refuses a list of attachment ids that is too long,
// holds an id twice, or an empty or overlong one.
func checkAttachmentIDs(ids []string) error {
	if len(ids) > MaxAttachmentsPerMessage || slices.ContainsFunc(ids, func(id string) bool { return id == "" || len(id) > 100 }) {
		return errAttachmentRefs
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(ids) {
		return errAttachmentRefs
	}
	return nil
}
