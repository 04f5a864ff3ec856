package payload_test

import (
	"strings"
	"testing"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/payload"
)

// TestAttachedParts: a text file that carries its data becomes its text
// in a fenced block under its name, for every profile; an image that
// carries its data stays a part of a user message with Images, and
// becomes a placeholder without, as does every part without data or
// outside a user message.
func TestAttachedParts(t *testing.T) {
	img := model.Part{Kind: "image", MIMEType: "image/png", Name: "cat.png", Data: []byte{1, 2, 3}}
	file := model.Part{Kind: "file", MIMEType: "text/markdown", Name: "notes.md", Data: []byte("# A\n```\ncode\n```\n")}
	far := model.Part{Kind: "image", MIMEType: "image/png", Name: "old.png", Size: 9}
	msgs := []model.Message{{Role: model.RoleUser, Content: "look", Parts: []model.Part{img, file, far}}}

	want := "look\n\nFile \"notes.md\":\n````\n# A\n```\ncode\n```\n````"
	for _, tc := range []struct {
		name    string
		profile payload.Profile
		content string
		parts   int
	}{
		{"none", 0, want, 2},
		{"text only", payload.OpenAICompatible, want + "\n[image: \"cat.png\", image/png, 3 bytes]\n[image: \"old.png\", image/png, 9 bytes]", 0},
		{"images", payload.OpenAICompatible | payload.Images, want + "\n[image: \"old.png\", image/png, 9 bytes]", 1},
	} {
		out := payload.Prepare(tc.profile, msgs)
		if len(out) != 1 || out[0].Content != tc.content || len(out[0].Parts) != tc.parts {
			t.Errorf("%s: %q with %d parts, want %q with %d", tc.name, out[0].Content, len(out[0].Parts), tc.content, tc.parts)
		}
	}
	if len(msgs[0].Parts) != 3 || msgs[0].Content != "look" {
		t.Error("Prepare modified its input")
	}
	// An image in a tool result is a placeholder even with Images.
	out := payload.Prepare(payload.Images|payload.TextOnly, []model.Message{{Role: model.RoleTool, ToolCallID: "c", Parts: []model.Part{img}}})
	if len(out[0].Parts) != 0 || !strings.Contains(out[0].Content, "[image: ") {
		t.Errorf("a tool result's image = %+v", out[0])
	}
	if got := payload.FencedFile("a.txt", "no fence"); got != "File \"a.txt\":\n```\nno fence\n```" {
		t.Errorf("FencedFile = %q", got)
	}
}
