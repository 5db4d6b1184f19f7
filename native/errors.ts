/**
 * Typed errors of the inference engine. Each carries the context that identifies what failed and
 * keeps the underlying error as `cause`.
 */
export type NativeErrorCode =
  /** A processor type we do not implement (or that belongs to the other chain kind). */
  | 'UNSUPPORTED_PROCESSOR'
  /** Processor params failed validation. */
  | 'INVALID_PROCESSOR_PARAMS'
  /** A model directory or ONNX file is missing or does not have the expected I/O contract. */
  | 'MODEL_LOAD_FAILED'
  /** Pipeline params are out of range (for example a t_index beyond num_inference_steps). */
  | 'INVALID_PARAMS'
  /** A method was called on a closed object. */
  | 'INVALID_STATE'
  /** An ONNX Runtime `run` failed mid-frame. */
  | 'INFERENCE_FAILED';

export class NativeError extends Error {
  readonly code: NativeErrorCode;
  constructor(code: NativeErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

export class UnsupportedProcessorError extends NativeError {
  readonly processorType: string;
  readonly kind: 'image' | 'latent';
  constructor(processorType: string, kind: 'image' | 'latent', supported: readonly string[]) {
    super(
      'UNSUPPORTED_PROCESSOR',
      `unsupported ${kind} processor [type:${processorType}] (supported: ${supported.join(', ')})`,
    );
    this.processorType = processorType;
    this.kind = kind;
  }
}

export class InvalidProcessorParamsError extends NativeError {
  readonly processorType: string;
  constructor(processorType: string, detail: string, options?: { cause?: unknown }) {
    super('INVALID_PROCESSOR_PARAMS', `invalid params for processor [type:${processorType}]: ${detail}`, options);
    this.processorType = processorType;
  }
}

export class ModelLoadError extends NativeError {
  readonly modelDir: string;
  constructor(modelDir: string, detail: string, options?: { cause?: unknown }) {
    super('MODEL_LOAD_FAILED', `model load failed [dir:${modelDir}]: ${detail}`, options);
    this.modelDir = modelDir;
  }
}

export class InvalidParamsError extends NativeError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super('INVALID_PARAMS', `invalid stream params: ${detail}`, options);
  }
}

export class InvalidStateError extends NativeError {
  constructor(detail: string) {
    super('INVALID_STATE', detail);
  }
}

export class InferenceError extends NativeError {
  readonly stage: string;
  constructor(stage: string, detail: string, options?: { cause?: unknown }) {
    super('INFERENCE_FAILED', `inference failed [stage:${stage}]: ${detail}`, options);
    this.stage = stage;
  }
}
