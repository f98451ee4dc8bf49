// The tokenizer and K3's chat markup as the faces use them (`k3 tokenize`, `k3 render`, the
// server's request and context checks), named here so they import the library only.

export {
  K3RenderError,
  PyJsonError,
  checkTokenizerFits,
  encodeK3Segments,
  k3ChatSegments,
  k3PromptTokenCount,
  k3RequestFromBody,
  loadTokenizer,
  pyLoads,
  renderChat,
  type ChatMessage,
  type ChatSegment,
  type Tokenizer,
} from '../tokenizer/index.js';
