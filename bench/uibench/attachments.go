package main

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"

	"github.com/usherhq/usher/assistant"
	"github.com/usherhq/usher/store"
)

// seedAttachments stores n images of the run's owner (PNGs of 320×240,
// each its own), sent in the run, and returns their references by the
// turn whose user message sends each: n turns spread evenly over turns,
// the newest first, so that the last page holds some.
func seedAttachments(ctx context.Context, st store.Store, runID string, turns, n int) (map[int][]assistant.AttachmentRef, error) {
	out := map[int][]assistant.AttachmentRef{}
	if n <= 0 {
		return out, nil
	}
	r, err := st.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	step := max(1, turns/n)
	var ids []string
	for i := range min(n, turns) {
		data, err := benchImage(i)
		if err != nil {
			return nil, err
		}
		a, err := st.PutAttachment(ctx, store.Attachment{ID: fmt.Sprintf("att_uibench_%04d", i), Owner: r.Owner,
			Name: fmt.Sprintf("screenshot-%d.png", i), ContentType: "image/png"}, data, 1<<30)
		if err != nil {
			return nil, fmt.Errorf("attachment %d: %w", i, err)
		}
		turn := turns - 1 - i*step
		out[turn] = append(out[turn], assistant.AttachmentRef{ID: a.ID, Name: a.Name, Type: a.ContentType, Size: a.Size, SHA256: a.SHA256})
		ids = append(ids, a.ID)
	}
	for len(ids) > 0 {
		k := min(len(ids), assistant.MaxAttachmentsPerMessage)
		if _, err := st.AttachToRun(ctx, runID, r.Owner, ids[:k]); err != nil {
			return nil, err
		}
		ids = ids[k:]
	}
	return out, nil
}

// benchImage is the i-th image: a gradient with a band where i says.
func benchImage(i int) ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, 320, 240))
	for y := range 240 {
		for x := range 320 {
			c := color.RGBA{R: uint8(x * 255 / 320), G: uint8(y * 255 / 240), B: 160, A: 255}
			if (y+i*7)%240 < 24 {
				c = color.RGBA{R: 36, G: 81, B: 200, A: 255}
			}
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	err := png.Encode(&b, img)
	return b.Bytes(), err
}
