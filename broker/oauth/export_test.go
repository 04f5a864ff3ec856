package oauth

// RedirectSourceForTest exposes redirectSource to the external tests.
var RedirectSourceForTest = redirectSource
