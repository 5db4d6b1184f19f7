// Typed lint rules: floating promises and type-only imports are the bugs we most want caught.
import tseslint from 'typescript-eslint';

// Import rules. ESLint keeps one `no-restricted-imports` per file (the last matching block's), so
// every block below lists the rules that hold everywhere and adds its own.
const ENTRIES = [
  { regex: '(^|/)params/(?!index\\.ts$)', message: 'Import the params module through its entry, native/params/index.ts.' },
  { regex: '(^|/)outbound/(?!index\\.ts$)', message: 'Import outbound/ through its entry, outbound/index.ts.' },
];
const ENGINE = { regex: '(^|/)native/(?!params/index\\.ts$)', message: 'control/ and streams/ import only native/params/index.ts from native/ (the engine entry loads ONNX Runtime).' };
const MEDIA_TOP = { regex: '^\\.\\./(MediaNode|MediaRoutes|WhipWhepRoutes|HlsRoutes|index)\\.ts$', message: 'The node and its routes sit on top of media/: nothing below imports them.' };
const imports = (...patterns) => ({ 'no-restricted-imports': ['error', { patterns: [...ENTRIES, ...patterns] }] });

export default tseslint.config(
  { ignores: ['node_modules/**', 'build/**', 'dist/**', 'dist.*/**', 'data/**', 'web/vendor/**', 'bench/results/**', '.tap/**', 'test/artifacts/**'] },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.base],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // tap's t.test() returns a promise that tap itself awaits; awaiting it by hand is noise.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafePromises: [{ from: 'package', name: 'PromiseWithSubtest', package: '@tapjs/core' }] },
      ],
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-var': 'error',
      'prefer-const': 'error',
      eqeqeq: ['error', 'smart'],
    },
  },
  // The params vocabulary and outbound/ have one entry each: nobody reaches past their index.
  { files: ['**/*.ts'], ignores: ['native/params/**'], rules: imports() },
  // HTTP, CLI and the stream domain use the engine only through its params module: the engine's
  // entry loads ONNX Runtime, which an api-only process must not (media nodes load it lazily).
  { files: ['control/**/*.ts'], rules: imports(ENGINE) },
  // The stream domain stands below HTTP: it never imports control/ (routes, replies, wiring).
  {
    files: ['streams/**/*.ts'],
    rules: imports(
      ENGINE,
      { regex: '(^|/)control/', message: 'streams/ is the domain under control/: it never imports control/.' },
      { regex: '^\\.\\./(media|songs|store|webhooks|errors|images)/(?!index\\.ts$)', message: 'Use the other part through its index.ts.' },
    ),
  },
  // media/ in layers (docs/decisions/0027-media-by-protocol.md): the node and its routes on top,
  // then stream/ (a stream's objects), then the protocols (webrtc/, hls/, rtmp/), then gst/; the
  // shared vocabulary (errors, settings, Frame, VideoCodec, H264Nal…) at media/'s root. A layer
  // imports only those below it, and the protocols not each other.
  { files: ['media/stream/**/*.ts'], rules: imports(MEDIA_TOP) },
  {
    files: ['media/webrtc/**/*.ts', 'media/hls/**/*.ts', 'media/rtmp/**/*.ts'],
    rules: imports(MEDIA_TOP, { regex: '^\\.\\./(stream|webrtc|hls|rtmp)/', message: 'A protocol folder imports neither stream/ nor another protocol: only gst/ and media/\'s shared files below it.' }),
  },
  {
    files: ['media/gst/**/*.ts'],
    rules: imports(MEDIA_TOP, { regex: '^\\.\\./(stream|webrtc|hls|rtmp)/', message: 'gst/ is the bottom of media/: it imports only media/\'s shared files.' }),
  },
);
