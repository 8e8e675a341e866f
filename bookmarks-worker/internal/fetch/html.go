package fetch

import (
	"io"
	"strings"

	"golang.org/x/net/html"
)

// extractHTML returns a page's title and its visible text.
func extractHTML(r io.Reader) (title, text string) {
	z := html.NewTokenizer(r)
	var b, t strings.Builder
	skip := 0 // depth inside script, style and similar elements
	inTitle := false
	for {
		switch z.Next() {
		case html.ErrorToken:
			return t.String(), b.String()
		case html.StartTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style", "noscript", "template", "svg", "head":
				if string(name) != "head" {
					skip++
				}
			case "title":
				inTitle = true
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style", "noscript", "template", "svg":
				if skip > 0 {
					skip--
				}
			case "title":
				inTitle = false
			}
		case html.TextToken:
			switch {
			case inTitle:
				t.Write(z.Text())
			case skip == 0:
				b.Write(z.Text())
				b.WriteByte(' ')
			}
		}
	}
}
